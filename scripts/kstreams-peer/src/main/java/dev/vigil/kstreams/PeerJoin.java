package dev.vigil.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.processor.Cancellable;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowBytesStoreSupplier;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

/**
 * Vigil's join-enrich stage in the Kafka Streams DSL: payments LEFT JOIN orders on
 * order_id (both topics keyed and partitioned by it), an order within the join window
 * of the payment in either direction (inclusive); a payment that none matches comes
 * out with unmatched=true once stream time minus the grace (Vigil's bounded
 * out-of-orderness) has passed its window, as Vigil's watermark timer does.
 */
final class PeerJoin {
    private PeerJoin() {}

    static Topology topology(String orders, String payments, String output, String store, long windowMs, long graceMs,
                             double tolerance, boolean stamp) {
        Serde<String> keys = Serdes.String();
        Serde<JsonNode> json = Records.serde();
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, JsonNode> paymentStream = builder
            .stream(payments, Consumed.with(keys, json))
            .peek((k, v) -> Stamps.firstRecord())
            .filter((k, v) -> Records.validPayment(v));
        // The end-of-input records stay in the orders side: reaching the join, they move
        // its stream time past every window, and the pending payments come out unmatched
        // (Vigil's end-of-input markers move its watermark to the end of time).
        KStream<String, JsonNode> orderStream = builder
            .stream(orders, Consumed.with(keys, json))
            .peek((k, v) -> Stamps.firstRecord())
            .filter((k, v) -> Records.validOrder(v) || Records.isEnd(v))
            .processValues(EndTicker::new);
        JoinWindows window = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(windowMs), Duration.ofMillis(graceMs));
        // The join's two window stores (the shared store of pending left records follows
        // their kind): retention = window size + grace, duplicates kept, as the DSL requires.
        Duration retention = Duration.ofMillis(window.size() + window.gracePeriodMs());
        Duration size = Duration.ofMillis(window.size());
        StreamJoined<String, JsonNode, JsonNode> stores = StreamJoined.with(keys, json, json)
            .withThisStoreSupplier(supplier(store, "join-payments", retention, size))
            .withOtherStoreSupplier(supplier(store, "join-orders", retention, size));
        KStream<String, JsonNode> enriched = paymentStream
            .leftJoin(orderStream, (payment, order) -> (JsonNode) Records.enrich(payment, order, tolerance), window, stores);
        if (stamp) {
            enriched = enriched.processValues(Stamps.Processed::new);
        }
        enriched
            .selectKey((k, e) -> Records.outputKey(e))
            .to(output, Produced.with(keys, json));
        return builder.build();
    }

    /**
     * Passes the orders side through; after its partition's end-of-input record, sends
     * that record again once a second (five times), as a live stream's next records
     * would come. Kafka Streams emits a left join's unmatched results only while it
     * processes a record, at most once per emit interval of wall-clock time (1 s by
     * default): the last ones would otherwise stay unemitted for good, nothing
     * following the end of input.
     */
    static final class EndTicker implements FixedKeyProcessor<String, JsonNode, JsonNode> {
        private static final int TICKS = 5;
        private FixedKeyProcessorContext<String, JsonNode> context;
        private Cancellable ticking;
        private int ticks;

        @Override
        public void init(FixedKeyProcessorContext<String, JsonNode> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<String, JsonNode> record) {
            context.forward(record);
            if (Records.isEnd(record.value()) && ticking == null) {
                ticking = context.schedule(Duration.ofSeconds(1), PunctuationType.WALL_CLOCK_TIME, now -> {
                    context.forward(record);
                    if (++ticks >= TICKS) {
                        ticking.cancel();
                    }
                });
            }
        }
    }

    private static WindowBytesStoreSupplier supplier(String kind, String name, Duration retention, Duration size) {
        return switch (kind) {
            case "memory" -> Stores.inMemoryWindowStore(name, retention, size, true);
            case "rocksdb" -> Stores.persistentWindowStore(name, retention, size, true);
            default -> throw new IllegalArgumentException("--store must be memory or rocksdb, got " + kind);
        };
    }

    static void run(Map<String, String> o) throws InterruptedException {
        String store = Main.required(o, "store");
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, o.getOrDefault("app-id", "kstreams-join-" + store));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, Main.required(o, "bootstrap"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        // Kafka Streams' default under exactly-once, said here so that it shows.
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(o.getOrDefault("threads", "1")));
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG, Records.EventTime.class);
        props.put(StreamsConfig.STATE_DIR_CONFIG, o.getOrDefault("state-dir", System.getProperty("java.io.tmpdir") + "/kstreams-peer"));
        // Unmatched payments are emitted at Kafka Streams' default pace (at most once a
        // second of wall-clock time, `__emit.interval.ms.kstreams.outer.join.spurious.results.fix__`):
        // at 0 the join scans its store of pending payments on every record. EndTicker
        // sees to the last of them.
        boolean stamp = Boolean.parseBoolean(o.getOrDefault("stamp", "false"));
        if (stamp) {
            props.put(StreamsConfig.mainConsumerPrefix(ConsumerConfig.INTERCEPTOR_CLASSES_CONFIG), Stamps.Read.class.getName());
        }
        Topology topology = topology(
            o.getOrDefault("orders", "kstreams-orders"),
            o.getOrDefault("payments", "kstreams-payments"),
            o.getOrDefault("output", "kstreams-enriched-" + store),
            store,
            Long.parseLong(o.getOrDefault("window-ms", "10000")),
            Long.parseLong(o.getOrDefault("grace-ms", "2000")),
            Double.parseDouble(o.getOrDefault("tolerance", "0.01")),
            stamp);
        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            stopped.countDown();
        }));
        System.err.println("kstreams-peer: store " + store + "\n" + topology.describe());
        streams.start();
        stopped.await();
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }
}
