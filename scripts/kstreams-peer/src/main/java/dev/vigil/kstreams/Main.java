package dev.vigil.kstreams;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * The Kafka Streams peer of Vigil's join-enrich stage, and the small tools its
 * benchmarks (scripts/bench-kstreams.sh, scripts/bench-latency.sh) need around it:
 *
 * <pre>
 * run     --bootstrap B --store memory|rocksdb [--app-id ID] [--state-dir DIR] [--threads N]
 *         [--orders T] [--payments T] [--output T] [--window-ms 10000] [--grace-ms 2000]
 *         [--tolerance 0.01] [--stamp false]
 *                                   the join, until SIGTERM; says when it processed its
 *                                   first record on stderr; --stamp true: wall-clock
 *                                   stamps in the outputs' headers (see Stamps)
 * load    --bootstrap B --dir DATASET [--partitions 4] [--orders T] [--payments T]
 *         [--create T,T...]         a dataset folder's orders and payments as JSON, then
 *                                   an end-of-input record on every partition; prints
 *                                   valid_payments=N (the enriched records to expect)
 * await   --bootstrap B --group G --topics T,T --output T --expect N --pid-file F
 *         [--settle-s 5] [--timeout-s 1800] [--clk-tck 100]
 *                                   until G has committed the end of the input topics
 *                                   and the output holds N committed records; prints
 *                                   when (see Tools.await)
 * dump    --bootstrap B --topic T   the topic's committed records (read_committed) as
 *                                   ENRICHED&gt; lines on stdout
 * latency --bootstrap B --dir DATASET --rate R --output T [--warmup-s 30] [--seconds 30]
 *         [--tail-s 10] [--orders T] [--payments T] [--watch NAME:PID,...] [--clk-tck 100]
 *         [--cpu-stat CGROUP/cpu.stat]
 *                                   a dataset's orders and payments at a rate to the
 *                                   peer, and its latency (see Latency)
 * topics  --bootstrap B --names T,T [--partitions 4]
 *                                   creates the topics (kept for good)
 * </pre>
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage("say what to do: run, load, await, dump, latency or topics");
        }
        Map<String, String> options = options(Arrays.copyOfRange(args, 1, args.length));
        switch (args[0]) {
            case "run" -> PeerJoin.run(options);
            case "load" -> Loader.load(options);
            case "await" -> System.exit(Tools.await(options));
            case "dump" -> Tools.dump(options);
            case "latency" -> Latency.run(options);
            case "topics" -> Loader.topics(options);
            default -> usage("unknown command " + args[0]);
        }
    }

    /** `--name value` pairs. */
    static Map<String, String> options(String[] args) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                usage("expected --name value, got " + args[i]);
            }
            out.put(args[i].substring(2), args[i + 1]);
        }
        return out;
    }

    static String required(Map<String, String> options, String name) {
        String value = options.get(name);
        if (value == null) {
            usage("--" + name + " is required");
        }
        return value;
    }

    static void usage(String message) {
        System.err.println("kstreams-peer: " + message + " (see Main.java for the commands)");
        System.exit(2);
    }
}
