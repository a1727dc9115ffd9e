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
import java.nio.file.Files;
import java.nio.file.Path;
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
     * committed records with a value (read_committed), or has stopped growing for
     * --settle-s seconds after the offsets were committed (fewer outputs than expected:
     * the script warns).
     *
     * <p>Started before the contender, it says `kstreams-peer: await ready` on stderr
     * once it reads the output and the group's offsets, then reads the contender's pid
     * from --pid-file when it appears. Prints `committed_ms=T outputs_then=N
     * last_output_ms=T output=N cpu_at_commit_s=S`: when it saw the end of the input
     * committed (epoch ms; the offsets are polled every 20 ms) and how many outputs were
     * readable then (below the output's last stable offsets then); when it saw the last
     * output and how many there were in all; and the contender's CPU seconds (utime +
     * stime, --clk-tck ticks a second) when it saw the commit. Exit 0; the contender
     * gone first: 3; --timeout-s passed: 4.
     */
    static int await(Map<String, String> o) throws Exception {
        String bootstrap = Main.required(o, "bootstrap");
        String group = Main.required(o, "group");
        List<String> topics = Arrays.asList(Main.required(o, "topics").split(","));
        String output = Main.required(o, "output");
        long expect = Long.parseLong(Main.required(o, "expect"));
        Path pidFile = Path.of(Main.required(o, "pid-file"));
        long settleMs = Long.parseLong(o.getOrDefault("settle-s", "5")) * 1000;
        long clkTck = Long.parseLong(o.getOrDefault("clk-tck", "100"));
        long deadline = System.currentTimeMillis() + Long.parseLong(o.getOrDefault("timeout-s", "1800")) * 1000;
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        Properties consumerProps = new Properties();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        consumerProps.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        consumerProps.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 10000);
        // Outputs are seen when they become readable, not when a fetch wait ends.
        consumerProps.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 20);
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
            consumer.poll(Duration.ZERO);
            admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            System.err.println("kstreams-peer: await ready");
            long pid = -1;
            long count = 0;
            long lastOutputAt = -1;
            long committedAt = -1;
            long outputsThen = 0;
            double cpuAtCommit = -1;
            Map<TopicPartition, Long> readableThen = null;
            long nextCheck = 0;
            while (true) {
                int n = 0;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(20))) {
                    // Vigil's watermark markers ride in some of its topics as records
                    // without a value (shared/kafka/src/markers.rs): not outputs.
                    if (r.value() != null) {
                        n++;
                        if (readableThen != null && r.offset() < readableThen.get(new TopicPartition(r.topic(), r.partition()))) {
                            outputsThen++;
                        }
                    }
                }
                long now = System.currentTimeMillis();
                if (n > 0) {
                    count += n;
                    lastOutputAt = now;
                }
                if (committedAt < 0 && now >= nextCheck) {
                    nextCheck = now + 20;
                    Map<TopicPartition, OffsetAndMetadata> committed =
                        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                    boolean done = ends.entrySet().stream().allMatch(e -> {
                        OffsetAndMetadata c = committed.get(e.getKey());
                        return c != null && c.offset() >= e.getValue().offset();
                    });
                    if (done) {
                        committedAt = System.currentTimeMillis();
                        cpuAtCommit = Latency.cpuSeconds(pid, clkTck);
                        // What was readable then (under read_committed, the end offsets are
                        // the last stable ones), whether this reader has got to it yet or not.
                        readableThen = consumer.endOffsets(outputs);
                        outputsThen = count;
                    }
                }
                if (committedAt >= 0 && (count >= expect || now - Math.max(committedAt, lastOutputAt) >= settleMs)) {
                    System.out.printf("committed_ms=%d outputs_then=%d last_output_ms=%d output=%d cpu_at_commit_s=%.2f%n",
                        committedAt, outputsThen, lastOutputAt, count, cpuAtCommit);
                    return 0;
                }
                if (pid < 0 && Files.exists(pidFile)) {
                    String text = Files.readString(pidFile).trim();
                    pid = text.isEmpty() ? -1 : Long.parseLong(text);
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
