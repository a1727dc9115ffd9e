package dev.vigil.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.processor.TimestampExtractor;

import java.io.IOException;

/**
 * Vigil's order and payment records as JSON, validated as Vigil validates them
 * (shared/model/src/input.rs: typed fields, non-empty ids, finite non-negative amounts,
 * non-negative epoch-millisecond times), and the enrichment of
 * shared/operators/src/join_enrich.rs.
 */
final class Records {
    static final ObjectMapper JSON = new ObjectMapper();
    /** Its value marks the end of a partition's input; "ts" is its (far-future) event time. */
    static final String END_OF_INPUT = "end_of_input";
    /** Within this of the tolerance, a difference is still a match (binary fractions). */
    private static final double MARGIN = 1e-9;

    private Records() {}

    static boolean isEnd(JsonNode node) {
        return node != null && node.has(END_OF_INPUT);
    }

    static boolean validOrder(JsonNode n) {
        return n != null && n.isObject() && id(n, "order_id") && id(n, "customer_id") && amount(n, "order_amount")
            && millis(n, "order_ts") && text(n, "country");
    }

    static boolean validPayment(JsonNode n) {
        return n != null && n.isObject() && id(n, "payment_id") && id(n, "order_id") && amount(n, "paid_amount")
            && millis(n, "payment_ts") && text(n, "method");
    }

    private static boolean text(JsonNode n, String field) {
        JsonNode v = n.get(field);
        return v != null && v.isTextual();
    }

    private static boolean id(JsonNode n, String field) {
        return text(n, field) && !n.get(field).textValue().trim().isEmpty();
    }

    private static boolean amount(JsonNode n, String field) {
        JsonNode v = n.get(field);
        return v != null && v.isNumber() && Double.isFinite(v.doubleValue()) && v.doubleValue() >= 0.0;
    }

    private static boolean millis(JsonNode n, String field) {
        JsonNode v = n.get(field);
        return v != null && v.isIntegralNumber() && v.canConvertToLong() && v.longValue() >= 0;
    }

    /** The payment's fields plus its order's context (null: unmatched), as Vigil's `enrich`. */
    static ObjectNode enrich(JsonNode payment, JsonNode order, double tolerance) {
        ObjectNode e = JSON.createObjectNode();
        double paid = payment.get("paid_amount").doubleValue();
        e.put("record_type", "enriched_payment");
        e.set("payment_id", payment.get("payment_id"));
        e.set("order_id", payment.get("order_id"));
        e.put("paid_amount", paid);
        e.set("method", payment.get("method"));
        e.put("payment_ts_ms", payment.get("payment_ts").longValue());
        e.put("unmatched", order == null);
        if (order == null) {
            e.putNull("customer_id");
            e.putNull("order_amount");
            e.putNull("country");
            e.put("amount_mismatch", false);
        } else {
            double ordered = order.get("order_amount").doubleValue();
            e.set("customer_id", order.get("customer_id"));
            e.put("order_amount", ordered);
            e.set("country", order.get("country"));
            e.put("amount_mismatch", Math.abs(paid - ordered) - tolerance > MARGIN);
        }
        return e;
    }

    /** Its key on Kafka, as Vigil's `EnrichedPayment::key`: the customer, or the order when unmatched. */
    static String outputKey(JsonNode enriched) {
        JsonNode customer = enriched.get("customer_id");
        return customer != null && customer.isTextual() ? customer.textValue() : enriched.get("order_id").textValue();
    }

    /** JSON values; bytes that are not JSON come out as null (and are filtered as invalid). */
    static Serde<JsonNode> serde() {
        Serializer<JsonNode> serializer = (topic, node) -> {
            try {
                return node == null ? null : JSON.writeValueAsBytes(node);
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        };
        Deserializer<JsonNode> deserializer = (topic, bytes) -> {
            if (bytes == null) {
                return null;
            }
            try {
                return JSON.readTree(bytes);
            } catch (IOException e) {
                return null;
            }
        };
        return Serdes.serdeFrom(serializer, deserializer);
    }

    /**
     * Event time from the record itself (order_ts, payment_ts, or an end-of-input
     * record's ts), as Vigil's stages take it; a record that has none (it is invalid
     * and will be filtered) keeps its partition's time.
     */
    public static final class EventTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            if (record.value() instanceof JsonNode n) {
                for (String field : new String[] {"order_ts", "payment_ts", "ts"}) {
                    JsonNode v = n.get(field);
                    if (v != null && v.isIntegralNumber() && v.canConvertToLong() && v.longValue() >= 0) {
                        return v.longValue();
                    }
                }
            }
            return Math.max(partitionTime, 0L);
        }
    }
}
