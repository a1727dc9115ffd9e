package dev.vigil.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
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
                             double tolerance) {
        Serde<String> keys = Serdes.String();
        Serde<JsonNode> json = Records.serde();
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, JsonNode> paymentStream = builder
            .stream(payments, Consumed.with(keys, json))
            .filter((k, v) -> Records.validPayment(v));
        // The end-of-input records stay in the orders side: reaching the join, they move
        // its stream time past every window, and the pending payments come out unmatched
        // (Vigil's end-of-input markers move its watermark to the end of time).
        KStream<String, JsonNode> orderStream = builder
            .stream(orders, Consumed.with(keys, json))
            .filter((k, v) -> Records.validOrder(v) || Records.isEnd(v));
        JoinWindows window = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(windowMs), Duration.ofMillis(graceMs));
        // The join's two window stores (the shared store of pending left records follows
        // their kind): retention = window size + grace, duplicates kept, as the DSL requires.
        Duration retention = Duration.ofMillis(window.size() + window.gracePeriodMs());
        Duration size = Duration.ofMillis(window.size());
        StreamJoined<String, JsonNode, JsonNode> stores = StreamJoined.with(keys, json, json)
            .withThisStoreSupplier(supplier(store, "join-payments", retention, size))
            .withOtherStoreSupplier(supplier(store, "join-orders", retention, size));
        paymentStream
            .leftJoin(orderStream, (payment, order) -> (JsonNode) Records.enrich(payment, order, tolerance), window, stores)
            .selectKey((k, enriched) -> Records.outputKey(enriched))
            .to(output, Produced.with(keys, json));
        return builder.build();
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
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(o.getOrDefault("threads", "1")));
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG, Records.EventTime.class);
        props.put(StreamsConfig.STATE_DIR_CONFIG, o.getOrDefault("state-dir", System.getProperty("java.io.tmpdir") + "/kstreams-peer"));
        // Non-joined payments are checked for on every record (--emit-interval-ms 0), not
        // at most once a second of wall-clock time (the default throttle): otherwise the
        // last ones can stay unemitted for good once no record follows the end of input.
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX,
            Long.parseLong(o.getOrDefault("emit-interval-ms", "0")));
        Topology topology = topology(
            o.getOrDefault("orders", "kstreams-orders"),
            o.getOrDefault("payments", "kstreams-payments"),
            o.getOrDefault("output", "kstreams-enriched-" + store),
            store,
            Long.parseLong(o.getOrDefault("window-ms", "10000")),
            Long.parseLong(o.getOrDefault("grace-ms", "2000")),
            Double.parseDouble(o.getOrDefault("tolerance", "0.01")));
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
