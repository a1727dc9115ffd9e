package dev.vigil.kstreams;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/** What the benchmark needs to see from outside a contender. */
final class Tools {
    private Tools() {}

    /**
     * Waits until a contender is done: its consumer group has committed the end offset
     * of every partition of the input --topics, and its --output topic holds --expect
     * committed records with a value (read_committed), or has stopped growing for --settle-s seconds
     * after the offsets were committed (fewer outputs than expected: the script warns).
     * Prints `done_s=S output=N`, S being seconds from --since-ms (epoch ms) to the later
     * of the two events. Exit 0; the process --pid gone first: 3; --timeout-s passed: 4.
     */
    static int await(Map<String, String> o) throws Exception {
        String bootstrap = Main.required(o, "bootstrap");
        String group = Main.required(o, "group");
        List<String> topics = Arrays.asList(Main.required(o, "topics").split(","));
        String output = Main.required(o, "output");
        long expect = Long.parseLong(Main.required(o, "expect"));
        long since = Long.parseLong(Main.required(o, "since-ms"));
        long pid = Long.parseLong(o.getOrDefault("pid", "-1"));
        long settleMs = Long.parseLong(o.getOrDefault("settle-s", "5")) * 1000;
        long deadline = System.currentTimeMillis() + Long.parseLong(o.getOrDefault("timeout-s", "1800")) * 1000;
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        Properties consumerProps = new Properties();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10000);
        try (Admin admin = Admin.create(props);
             KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(consumerProps, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (TopicDescription d : admin.describeTopics(topics).allTopicNames().get().values()) {
                d.partitions().forEach(p -> latest.put(new TopicPartition(d.name(), p.partition()), OffsetSpec.latest()));
            }
            Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(latest).all().get();
            List<TopicPartition> outputs = new ArrayList<>();
            consumer.partitionsFor(output).forEach(p -> outputs.add(new TopicPartition(output, p.partition())));
            consumer.assign(outputs);
            consumer.seekToBeginning(outputs);
            long count = 0;
            long lastOutputAt = since;
            long committedAt = -1;
            long nextCheck = 0;
            while (true) {
                long now = System.currentTimeMillis();
                int n = 0;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    // Vigil's watermark markers ride in its output topics as records
                    // without a value (shared/kafka/src/markers.rs): not outputs.
                    if (r.value() != null) {
                        n++;
                    }
                }
                if (n > 0) {
                    count += n;
                    lastOutputAt = System.currentTimeMillis();
                }
                if (committedAt < 0 && now >= nextCheck) {
                    nextCheck = now + 200;
                    Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                    boolean done = ends.entrySet().stream().allMatch(e -> {
                        OffsetAndMetadata c = committed.get(e.getKey());
                        return c != null && c.offset() >= e.getValue().offset();
                    });
                    if (done) {
                        committedAt = System.currentTimeMillis();
                    }
                }
                if (committedAt >= 0 && (count >= expect || now - Math.max(committedAt, lastOutputAt) >= settleMs)) {
                    long doneAt = Math.max(committedAt, count > 0 ? lastOutputAt : committedAt);
                    System.out.printf("done_s=%.3f output=%d%n", (doneAt - since) / 1000.0, count);
                    return 0;
                }
                if (pid > 0 && ProcessHandle.of(pid).map(h -> !h.isAlive()).orElse(true)) {
                    System.err.println("kstreams-peer: process " + pid + " ended before group " + group + " was done");
                    return 3;
                }
                if (now > deadline) {
                    System.err.printf("kstreams-peer: group %s not done in time (offsets committed: %b, output %d of %d)%n",
                        group, committedAt >= 0, count, expect);
                    return 4;
                }
            }
        }
    }

    /** Every committed record of the topic, from its start to its end, as a tagged line. */
    static void dump(Map<String, String> o) throws Exception {
        String topic = Main.required(o, "topic");
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, Main.required(o, "bootstrap"));
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5000);
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            consumer.partitionsFor(topic).forEach(p -> partitions.add(new TopicPartition(topic, p.partition())));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            // Under read_committed: the last stable offsets.
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            while (partitions.stream().anyMatch(p -> consumer.position(p) < ends.get(p))) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    if (r.value() == null) {
                        continue;
                    }
                    out.write("ENRICHED> ");
                    out.write(new String(r.value(), StandardCharsets.UTF_8));
                    out.write('\n');
                }
            }
        }
        out.flush();
    }
}
