#!/usr/bin/env python3
"""Compares the tagged output lines of a Kafka run with the embedded runtime's.

    compare-outputs.py [--any-lag] KAFKA_LINES EMBEDDED_LINES

Both files hold `KIND> {json}` lines (as `vigil tail` and `vigil-pipeline`
print them). Lines are compared as multisets: a line the embedded runtime has more
often is lost, one Kafka has more often is duplicated (or wrong). Dead letters are
counted apart. Prints one summary line per kind and the totals; exits 1 when the
outputs differ.

With --any-lag, the watermark a late event was judged against, its lag and a
watermark-lag alert's maximum are not compared: with device events not keyed by
site, a late event is judged at its site's task against the watermark of the tasks
that forwarded it, not of its own partition (see the README, "What exactly-once
means here").
"""
import collections
import re
import sys

LAG = re.compile(r'"(watermark_ms|lag_ms|max_lag_ms)": -?\d+')


def read(path, any_lag):
    lines, dead = collections.Counter(), 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("DEAD_LETTER>"):
                dead += 1
            else:
                if any_lag:
                    line = LAG.sub(lambda m: f'"{m.group(1)}": _', line)
                lines[line] += 1
    return lines, dead


def main():
    args = sys.argv[1:]
    any_lag = "--any-lag" in args
    kafka_path, embedded_path = [a for a in args if a != "--any-lag"]
    kafka, kafka_dead = read(kafka_path, any_lag)
    embedded, embedded_dead = read(embedded_path, any_lag)
    lost = embedded - kafka
    extra = kafka - embedded
    kinds = sorted({l.split(">")[0] for l in embedded} | {l.split(">")[0] for l in kafka})
    print("| kind | embedded | kafka | lost | duplicated or wrong |")
    print("|---|---|---|---|---|")
    for kind in kinds:
        of = lambda c: sum(n for l, n in c.items() if l.split(">")[0] == kind)
        print(f"| {kind} | {of(embedded)} | {of(kafka)} | {of(lost)} | {of(extra)} |")
    print(f"| DEAD_LETTER | {embedded_dead} | {kafka_dead} | {max(0, embedded_dead - kafka_dead)} | {max(0, kafka_dead - embedded_dead)} |")
    verified = sum((embedded & kafka).values())
    print(f"\nrecords verified: {verified}; lost: {sum(lost.values())}; duplicated or wrong: {sum(extra.values())}; "
          f"dead letters: {kafka_dead} (embedded {embedded_dead})")
    same = not lost and not extra and kafka_dead == embedded_dead
    print("same output" if same else "OUTPUTS DIFFER")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
