package dev.vigil.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

import java.io.BufferedReader;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.LockSupport;

/**
 * The peer's latency, measured as Vigil's latency probe (shared/kafka/examples/
 * latency_probe.rs) measures join-enrich's: from a payment's production (its input
 * record's Kafka timestamp, CreateTime) to its enriched record becoming readable
 * under read_committed, for the matched payments produced in the window (an
 * unmatched one waits for its join window by design).
 *
 * <p>The load is the dataset folder `vigil generate --out DIR` wrote, as
 * `vigil generate --kafka --no-finish --rate R` sends it: the three streams merged by
 * event time (a line that is no record goes as soon as it is next, ties to orders,
 * then payments, then devices), paced at R records a second counting all three; the
 * device events, which the join does not read, are counted but not sent, so orders
 * and payments come at the pace Vigil's join-enrich gets them. Keyed by order_id,
 * stamped with the wall clock as sent, with the generator's producer settings
 * (idempotent, acks=all, linger 10 ms, uncompressed).
 *
 * <p>After --warmup-s seconds of it, the outputs are read from their end for
 * --seconds plus --tail-s seconds, with fetches answered as soon as records are
 * readable (fetch.min.bytes 1, wait at most 100 ms, as the probe's). Where the peer
 * runs with `--stamp true` ({@link Stamps}), each sample is also split as Vigil's
 * `vigil_record_hop_seconds` splits a hop.
 */
final class Latency {
    /** The upper bounds of `vigil_record_hop_seconds`' buckets, seconds (shared/kafka/src/metrics.rs). */
    private static final double[] BUCKETS = {0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04,
        0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};

    private Latency() {}

    /** One output read: its payment, when it became readable, and the peer's stamps. */
    private record Seen(String paymentId, long seenMs, long createdMs, long readMs, long processedMs) {}

    static void run(Map<String, String> o) throws Exception {
        String bootstrap = Main.required(o, "bootstrap");
        Path dir = Path.of(Main.required(o, "dir"));
        double rate = Double.parseDouble(Main.required(o, "rate"));
        long warmupMs = Long.parseLong(o.getOrDefault("warmup-s", "30")) * 1000;
        long seconds = Long.parseLong(o.getOrDefault("seconds", "30"));
        long tailMs = Long.parseLong(o.getOrDefault("tail-s", "10")) * 1000;
        String orders = o.getOrDefault("orders", "kstreams-orders");
        String payments = o.getOrDefault("payments", "kstreams-payments");
        String output = Main.required(o, "output");
        Map<String, Long> watched = watched(o.getOrDefault("watch", ""));
        long clkTck = Long.parseLong(o.getOrDefault("clk-tck", "100"));
        String cpuStat = o.getOrDefault("cpu-stat", "");

        long started = System.currentTimeMillis();
        long measureFrom = started + warmupMs;
        long measureUntil = measureFrom + seconds * 1000 + tailMs;
        // Payment id -> when it was produced, for those produced in the window.
        Map<String, Long> produced = new ConcurrentHashMap<>();
        List<Seen> seen = new ArrayList<>();
        Map<String, Double> cpu = new LinkedHashMap<>();
        Thread reader = new Thread(() -> {
            try {
                sleepUntil(measureFrom);
                watched.forEach((name, pid) -> cpu.put(name, -cpuSeconds(pid, clkTck)));
                cpu.put("tool", -ownCpuSeconds());
                if (!cpuStat.isEmpty()) {
                    cpu.put("quota-waits", -throttledSeconds(cpuStat));
                }
                read(bootstrap, output, measureUntil, seen);
                watched.forEach((name, pid) -> cpu.merge(name, cpuSeconds(pid, clkTck), Double::sum));
                cpu.merge("tool", ownCpuSeconds(), Double::sum);
                if (!cpuStat.isEmpty()) {
                    cpu.merge("quota-waits", throttledSeconds(cpuStat), Double::sum);
                }
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }, "output-reader");
        reader.start();
        long[] sent = produce(bootstrap, dir, orders, payments, rate, measureFrom, measureUntil, produced);
        double producedFor = (System.currentTimeMillis() - started) / 1000.0;
        System.err.printf("kstreams-peer: sent %d orders and %d payments (%d device events paced, not sent) in %.1f s: "
            + "%.0f records/s counting all three%n", sent[0], sent[1], sent[2], producedFor,
            (sent[0] + sent[1] + sent[2]) / producedFor);
        reader.join();
        report(seen, produced, cpu, seconds * 1000 + tailMs);
    }

    /** `name:pid,name:pid`: processes whose CPU seconds over the window are reported. */
    private static Map<String, Long> watched(String spec) {
        Map<String, Long> out = new LinkedHashMap<>();
        for (String item : spec.split(",")) {
            if (!item.isBlank()) {
                String[] nameAndPid = item.split(":");
                out.put(nameAndPid[0], Long.parseLong(nameAndPid[1]));
            }
        }
        return out;
    }

    /** utime + stime of a process from /proc, seconds; 0 once it is gone. */
    static double cpuSeconds(long pid, long clkTck) {
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return (Long.parseLong(fields[11]) + Long.parseLong(fields[12])) / (double) clkTck;
        } catch (IOException e) {
            return 0;
        }
    }

    /** The time a CPU quota's cgroup was throttled, from its cpu.stat (v1 ns, v2 us), seconds. */
    private static double throttledSeconds(String cpuStat) {
        try {
            for (String line : Files.readAllLines(Path.of(cpuStat))) {
                String[] kv = line.split(" ");
                if (kv[0].equals("throttled_time")) {
                    return Long.parseLong(kv[1]) / 1e9;
                }
                if (kv[0].equals("throttled_usec")) {
                    return Long.parseLong(kv[1]) / 1e6;
                }
            }
        } catch (IOException e) {
            // No quota (any more): nothing waited.
        }
        return 0;
    }

    private static double ownCpuSeconds() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
            .getProcessCpuTime() / 1e9;
    }

    private static void sleepUntil(long epochMs) {
        for (long left; (left = epochMs - System.currentTimeMillis()) > 0; ) {
            LockSupport.parkNanos(left * 1_000_000);
        }
    }

    /** One stream of the dataset, its next line read ahead with where it goes in the merge. */
    private static final class Stream implements AutoCloseable {
        final int kind;
        final String tsField;
        final BufferedReader in;
        String line;
        JsonNode node;
        long key;

        Stream(int kind, Path file, String tsField) throws IOException {
            this.kind = kind;
            this.tsField = tsField;
            this.in = Files.exists(file) ? Files.newBufferedReader(file, StandardCharsets.UTF_8) : null;
            advance();
        }

        void advance() throws IOException {
            do {
                line = in == null ? null : in.readLine();
            } while (line != null && line.isBlank());
            if (line == null) {
                key = Long.MAX_VALUE;
                return;
            }
            if (kind == 2) {
                // Only their place in the merge matters, not their fields: half the
                // lines, parsed no further than their event time.
                node = null;
                key = eventTime(line, tsField);
                return;
            }
            try {
                node = Records.JSON.readTree(line);
            } catch (IOException e) {
                node = null;
            }
            boolean valid = kind == 0 ? Records.validOrder(node) : Records.validPayment(node);
            // As Vigil's merge: a line that is no record goes as soon as it is next.
            key = valid ? node.get(tsField).longValue() : Long.MIN_VALUE;
        }

        /** The integer after `"field":`, or Long.MIN_VALUE (no record: next in the merge). */
        private static long eventTime(String line, String field) {
            int at = line.indexOf('"' + field + '"');
            if (at < 0) {
                return Long.MIN_VALUE;
            }
            int i = line.indexOf(':', at) + 1;
            while (i > 0 && i < line.length() && line.charAt(i) == ' ') {
                i++;
            }
            long value = 0;
            int digits = 0;
            for (; i > 0 && i < line.length() && Character.isDigit(line.charAt(i)) && digits < 18; i++, digits++) {
                value = value * 10 + (line.charAt(i) - '0');
            }
            return digits == 0 ? Long.MIN_VALUE : value;
        }

        @Override
        public void close() throws IOException {
            if (in != null) {
                in.close();
            }
        }
    }

    /** Sends the dataset at the rate; returns {orders, payments, devices} counted. */
    private static long[] produce(String bootstrap, Path dir, String orders, String payments, double rate, long measureFrom,
                                  long until, Map<String, Long> produced) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 10);
        long[] counts = new long[3];
        long startNs = System.nanoTime();
        long n = 0;
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
             Stream o = new Stream(0, dir.resolve("orders.ndjson"), "order_ts");
             Stream pay = new Stream(1, dir.resolve("payments.ndjson"), "payment_ts");
             Stream dev = new Stream(2, dir.resolve("devices.ndjson"), "event_ts")) {
            Stream[] streams = {o, pay, dev};
            while (System.currentTimeMillis() < until) {
                Stream next = streams[0];
                for (Stream s : streams) {
                    if (s.key < next.key) {
                        next = s;
                    }
                }
                if (next.line == null) {
                    break;
                }
                if (next.kind < 2) {
                    JsonNode key = next.node == null ? null : next.node.get("order_id");
                    long now = System.currentTimeMillis();
                    if (next.kind == 1 && now >= measureFrom && next.key != Long.MIN_VALUE) {
                        produced.put(next.node.get("payment_id").textValue(), now);
                    }
                    producer.send(new ProducerRecord<>(next.kind == 0 ? orders : payments, null, now,
                        key != null && key.isTextual() ? key.textValue() : null, next.line.getBytes(StandardCharsets.UTF_8)));
                }
                counts[next.kind]++;
                next.advance();
                // Paced against the start, sleeping only once a millisecond ahead, as the generator.
                long aheadNs = (long) (++n * 1e9 / rate) - (System.nanoTime() - startNs);
                if (aheadNs >= 1_000_000) {
                    LockSupport.parkNanos(aheadNs);
                }
            }
            producer.flush();
        }
        return counts;
    }

    /** The output's records from its end until `until`, as they become readable. */
    private static void read(String bootstrap, String topic, long until, List<Seen> seen) {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        // The broker answers a read_committed fetch once a commit makes records readable.
        props.put(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, 1);
        props.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100);
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = new ArrayList<>();
            consumer.partitionsFor(topic).forEach(p -> partitions.add(new TopicPartition(topic, p.partition())));
            consumer.assign(partitions);
            consumer.seekToEnd(partitions);
            partitions.forEach(consumer::position);
            while (System.currentTimeMillis() < until) {
                var records = consumer.poll(Duration.ofMillis(100));
                long now = System.currentTimeMillis();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    JsonNode e;
                    try {
                        e = r.value() == null ? null : Records.JSON.readTree(r.value());
                    } catch (IOException ex) {
                        e = null;
                    }
                    // An unmatched payment waits for its join window by design.
                    if (e == null || e.path("unmatched").asBoolean(true)) {
                        continue;
                    }
                    seen.add(new Seen(e.path("payment_id").asText(), now, Stamps.get(r.headers(), Stamps.CREATED_MS),
                        Stamps.get(r.headers(), Stamps.READ_MS), Stamps.get(r.headers(), Stamps.PROCESSED_MS)));
                }
            }
        }
    }

    private static void report(List<Seen> seen, Map<String, Long> produced, Map<String, Double> cpu, long windowMs) {
        List<Long> latency = new ArrayList<>();
        List<Long> queued = new ArrayList<>();
        List<Long> processing = new ArrayList<>();
        List<Long> commitWait = new ArrayList<>();
        for (Seen s : seen) {
            Long at = produced.get(s.paymentId());
            if (at == null) {
                continue;
            }
            latency.add(s.seenMs() - at);
            if (s.readMs() >= 0 && s.createdMs() >= 0 && s.processedMs() >= 0) {
                queued.add(Math.max(0, s.readMs() - s.createdMs()));
                processing.add(Math.max(0, s.processedMs() - s.readMs()));
                commitWait.add(Math.max(0, s.seenMs() - s.readMs()));
            }
        }
        String name = "payment -> enriched payment (kstreams peer)";
        if (latency.isEmpty()) {
            System.out.println(name + ": no samples");
        } else {
            long[] v = sorted(latency);
            System.out.printf("%s: %d samples, latency p50 %d ms, p99 %d ms, max %d ms%n", name, v.length,
                percentile(v, 0.50), percentile(v, 0.99), v[v.length - 1]);
        }
        if (!queued.isEmpty()) {
            // The bucket bounds Vigil's hops are read in, then the samples' own values.
            StringBuilder line = new StringBuilder("kstreams-peer:");
            List<String> exact = new ArrayList<>();
            String[] parts = {"queued", "processing", "commit_wait"};
            List<List<Long>> all = List.of(queued, processing, commitWait);
            for (int i = 0; i < parts.length; i++) {
                long[] v = sorted(all.get(i));
                long p50 = percentile(v, 0.50);
                long p99 = percentile(v, 0.99);
                line.append(String.format(" %s p50 <= %s s, p99 <= %s s;", parts[i], bucket(p50), bucket(p99)));
                exact.add(String.format("%s p50 %d ms, p99 %d ms", parts[i], p50, p99));
            }
            System.out.printf("%s %d samples (exact: %s)%n", line, queued.size(), String.join("; ", exact));
        }
        StringBuilder line = new StringBuilder(String.format("CPU seconds over the window's %.0f s:", windowMs / 1000.0));
        cpu.forEach((n, s) -> line.append(String.format(" %s %.1f", n, s)));
        System.out.println(line);
    }

    private static long[] sorted(List<Long> values) {
        long[] v = values.stream().mapToLong(Long::longValue).toArray();
        Arrays.sort(v);
        return v;
    }

    /** As the probe's: the sample at rank round((n - 1) p). */
    private static long percentile(long[] sorted, double p) {
        return sorted[(int) Math.round((sorted.length - 1) * p)];
    }

    /** The upper bound of the `vigil_record_hop_seconds` bucket a duration falls in. */
    private static String bucket(long ms) {
        for (double b : BUCKETS) {
            if (ms / 1000.0 <= b) {
                return java.math.BigDecimal.valueOf(b).stripTrailingZeros().toPlainString();
            }
        }
        return "+Inf";
    }
}
