# shellcheck shell=bash
# Which node of the local stack is what (scripts/local-stack.sh leader,
# txn-coordinator, group-coordinator, under-replicated): Kafka's own tools, read as
# they print. Sourced by scripts/local-stack.sh, whose die, env_var and kafka-class
# they use.

# Runs a Kafka tool against every node of the stack.
tool() {
  local class="$1"; shift
  "$0" kafka-class "$class" --bootstrap-server "$(env_var VIGIL_BOOTSTRAP_SERVERS)" "$@"
}

# The node id of a partition's leader (TopicCommand's "Leader: N"; -1 when it has none).
leader() {
  [[ $# -eq 2 ]] || die "usage: $0 leader TOPIC PARTITION"
  tool org.apache.kafka.tools.TopicCommand --describe --topic "$1" |
    awk -v p="$2" '{for (i = 1; i < NF; i++) if ($i == "Partition:" && $(i + 1) == p) for (j = i; j < NF; j++) if ($j == "Leader:") {print $(j + 1); exit}}' |
    grep . || die "no partition $2 of topic $1"
}

# The node id of a transactional id's coordinator (TransactionsCommand's CoordinatorId).
txn_coordinator() {
  [[ $# -eq 1 ]] || die "usage: $0 txn-coordinator TRANSACTIONAL_ID"
  tool org.apache.kafka.tools.TransactionsCommand describe --transactional-id "$1" |
    awk 'h {print $c; exit} $1 == "CoordinatorId" {for (i = 1; i <= NF; i++) if ($i == "CoordinatorId") c = i; h = 1}' |
    grep . || die "no transaction coordinator found for $1"
}

# The node id of a consumer group's coordinator ("host:port (N)" in ConsumerGroupCommand).
group_coordinator() {
  [[ $# -eq 1 ]] || die "usage: $0 group-coordinator GROUP"
  tool org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --describe --state --group "$1" |
    sed -n 's/.*127\.0\.0\.1:[0-9]* *(\([0-9]*\)).*/\1/p' | head -n 1 | grep . ||
    die "no coordinator found for group $1"
}

# How many partitions have fewer in-sync replicas than replicas.
under_replicated() {
  local out
  out="$(tool org.apache.kafka.tools.TopicCommand --describe --under-replicated-partitions)"
  grep -c 'Partition:' <<<"$out" || true
}
