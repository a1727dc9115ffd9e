#!/usr/bin/env python3
"""Compares the tagged output lines of a Kafka run with the embedded runtime's.

    compare-outputs.py KAFKA_LINES EMBEDDED_LINES

Both files hold `KIND> {json}` lines (as `vigil tail` and `vigil-pipeline`
print them). Lines are compared as multisets: a line the embedded runtime has more
often is lost, one Kafka has more often is duplicated (or wrong). Dead letters are
counted apart. Prints one summary line per kind and the totals; exits 1 when the
outputs differ.

However the input is keyed, a late event's watermark and lag are compared too: the
stages judge lateness as if the producer had keyed the input (docs/kafka.md).
"""
import collections
import sys


def read(path):
    lines, dead = collections.Counter(), 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("DEAD_LETTER>"):
                dead += 1
            else:
                lines[line] += 1
    return lines, dead


def main():
    kafka_path, embedded_path = sys.argv[1:]
    kafka, kafka_dead = read(kafka_path)
    embedded, embedded_dead = read(embedded_path)
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
