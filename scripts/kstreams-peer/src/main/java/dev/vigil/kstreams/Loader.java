package dev.vigil.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * A dataset folder's orders.ndjson and payments.ndjson to two topics, each line as it
 * is (JSON), keyed by order_id (murmur2, the partitioner Vigil's generator uses too),
 * then one end-of-input record on every partition of both: the JSON copy of what
 * `vigil-generator --kafka --input DIR` produces as Avro. A line that is not a record
 * goes too, unkeyed, as Vigil's generator sends it, for the stage to reject.
 */
final class Loader {
    private Loader() {}

    static void load(Map<String, String> o) throws Exception {
        String bootstrap = Main.required(o, "bootstrap");
        Path dir = Path.of(Main.required(o, "dir"));
        int partitions = Integer.parseInt(o.getOrDefault("partitions", "4"));
        String orders = o.getOrDefault("orders", "kstreams-orders");
        String payments = o.getOrDefault("payments", "kstreams-payments");
        List<String> names = new ArrayList<>(List.of(orders, payments));
        for (String t : o.getOrDefault("create", "").split(",")) {
            if (!t.isBlank()) {
                names.add(t);
            }
        }
        create(bootstrap, names, partitions);
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 10);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 262144);
        long started = System.nanoTime();
        try (KafkaProducer<String, byte[]> producer =
                 new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
            long[] maxTs = {0L};
            long[] valid = {0L};
            long sentOrders = send(producer, dir.resolve("orders.ndjson"), orders, "order_ts", maxTs, valid);
            valid[0] = 0;
            long sentPayments = send(producer, dir.resolve("payments.ndjson"), payments, "payment_ts", maxTs, valid);
            // Far past every window of the data: a day after its last event.
            long endTs = maxTs[0] + 86_400_000L;
            ObjectNode end = Records.JSON.createObjectNode().put(Records.END_OF_INPUT, true).put("ts", endTs);
            byte[] endBytes = Records.JSON.writeValueAsBytes(end);
            for (String topic : new String[] {orders, payments}) {
                for (int q = 0; q < partitions; q++) {
                    producer.send(new ProducerRecord<>(topic, q, endTs, "__end_of_input__", endBytes));
                }
            }
            producer.flush();
            System.err.printf("kstreams-peer: loaded %d orders and %d payments lines (+%d end-of-input records) in %.1f s%n",
                sentOrders, sentPayments, 2 * partitions, (System.nanoTime() - started) / 1e9);
            System.out.println("valid_payments=" + valid[0]);
        }
    }

    /** `topics --bootstrap B --names T,T [--partitions 4]`. */
    static void topics(Map<String, String> o) throws Exception {
        create(Main.required(o, "bootstrap"), Arrays.asList(Main.required(o, "names").split(",")),
            Integer.parseInt(o.getOrDefault("partitions", "4")));
    }

    private static void create(String bootstrap, List<String> names, int partitions) throws Exception {
        // Kept for good: the records carry their event times (2023 in the generator's
        // data), which the broker's default 7-day retention would delete within minutes.
        List<NewTopic> topics = new ArrayList<>();
        for (String t : names) {
            topics.add(new NewTopic(t, partitions, (short) 1).configs(Map.of("retention.ms", "-1")));
        }
        Properties admin = new Properties();
        admin.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin client = Admin.create(admin)) {
            client.createTopics(topics).all().get();
        }
    }

    private static long send(KafkaProducer<String, byte[]> producer, Path file, String topic, String tsField, long[] maxTs,
                             long[] valid)
        throws IOException {
        long sent = 0;
        long lastTs = 0;
        try (BufferedReader in = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode node;
                try {
                    node = Records.JSON.readTree(line);
                } catch (IOException e) {
                    node = null;
                }
                if (tsField.equals("order_ts") ? Records.validOrder(node) : Records.validPayment(node)) {
                    valid[0]++;
                }
                JsonNode key = node == null ? null : node.get("order_id");
                JsonNode ts = node == null ? null : node.get(tsField);
                if (ts != null && ts.isIntegralNumber() && ts.longValue() >= 0) {
                    lastTs = ts.longValue();
                    maxTs[0] = Math.max(maxTs[0], lastTs);
                }
                producer.send(new ProducerRecord<>(topic, null, lastTs, key != null && key.isTextual() ? key.textValue() : null,
                    line.getBytes(StandardCharsets.UTF_8)));
                sent++;
            }
        }
        return sent;
    }
}
