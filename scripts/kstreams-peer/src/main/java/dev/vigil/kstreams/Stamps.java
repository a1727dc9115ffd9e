package dev.vigil.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerInterceptor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Wall-clock stamps the peer leaves for its benchmarks, so that they split its time as
 * Vigil's `vigil_record_hop_seconds` splits a stage's (queued: the input's Kafka
 * timestamp to the read; processing: the read to the join's output; commit_wait: the
 * read to the output being readable):
 *
 * <ul>
 *   <li>{@link Read}, the main consumer's interceptor, stamps each record as its poll
 *       returns it: when it was read, and its Kafka timestamp (CreateTime);</li>
 *   <li>{@link Processed}, after the join, stamps each output with when it was made.</li>
 * </ul>
 *
 * The join's output keeps the headers of the record that made it, so an enriched
 * payment carries the stamps of its payment (or of its order, when the order came
 * second). And {@link #firstRecord} tells the throughput benchmark when the first
 * input record was processed, its start-up being counted apart.
 */
final class Stamps {
    static final String READ_MS = "kstreams-read-ms";
    static final String CREATED_MS = "kstreams-created-ms";
    static final String PROCESSED_MS = "kstreams-processed-ms";

    private static final AtomicBoolean FIRST = new AtomicBoolean();

    private Stamps() {}

    /** The first input record processed: its wall-clock time and the process's CPU so far, on stderr. */
    static void firstRecord() {
        if (!FIRST.get() && FIRST.compareAndSet(false, true)) {
            long cpuNs = ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
            System.err.printf("kstreams-peer: first record processed at_ms=%d cpu_ms=%d%n", System.currentTimeMillis(),
                cpuNs / 1_000_000);
            System.err.flush();
        }
    }

    static byte[] bytes(long value) {
        return ByteBuffer.allocate(Long.BYTES).putLong(value).array();
    }

    /** The header's value as a long; -1 if it is not there. */
    static long get(Headers headers, String name) {
        Header h = headers.lastHeader(name);
        return h == null || h.value() == null || h.value().length != Long.BYTES ? -1 : ByteBuffer.wrap(h.value()).getLong();
    }

    /** The main consumer's interceptor (`main.consumer.interceptor.classes`). */
    public static final class Read implements ConsumerInterceptor<byte[], byte[]> {
        @Override
        public ConsumerRecords<byte[], byte[]> onConsume(ConsumerRecords<byte[], byte[]> records) {
            byte[] now = bytes(System.currentTimeMillis());
            for (ConsumerRecord<byte[], byte[]> r : records) {
                r.headers().add(READ_MS, now).add(CREATED_MS, bytes(r.timestamp()));
            }
            return records;
        }

        @Override
        public void onCommit(Map<TopicPartition, OffsetAndMetadata> offsets) {}

        @Override
        public void close() {}

        @Override
        public void configure(Map<String, ?> configs) {}
    }

    /** After the join: when each output was made. */
    static final class Processed implements FixedKeyProcessor<String, JsonNode, JsonNode> {
        private FixedKeyProcessorContext<String, JsonNode> context;

        @Override
        public void init(FixedKeyProcessorContext<String, JsonNode> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<String, JsonNode> record) {
            // A copy: the input record's headers are shared by every output it makes.
            Headers headers = new RecordHeaders(record.headers().toArray());
            headers.add(PROCESSED_MS, bytes(System.currentTimeMillis()));
            context.forward(record.withHeaders(headers));
        }
    }
}
