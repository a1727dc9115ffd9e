#!/usr/bin/env bash
# Stand-in for the scripts in /opt/kafka/bin of the official apache/kafka image: each
# script name is a symlink to this file, which runs the matching Kafka class with the
# same environment interface as the distribution's kafka-run-class.sh
# (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_OPTS, KAFKA_LOG4J_OPTS).
set -euo pipefail

name="${0##*/}"
log_level=WARN      # tools log warnings only, as the distribution's tools-log4j2 config does
default_heap=-Xmx256m
case "$name" in
  kafka-server-start.sh)
    class=kafka.Kafka; log_level=INFO; default_heap="-Xmx1G -Xms1G" ;;
  kafka-storage.sh) class=kafka.tools.StorageTool ;;
  kafka-broker-api-versions.sh) class=org.apache.kafka.tools.BrokerApiVersionsCommand ;;
  kafka-topics.sh) class=org.apache.kafka.tools.TopicCommand ;;
  kafka-configs.sh) class=org.apache.kafka.tools.ConfigCommand ;;
  kafka-console-producer.sh) class=org.apache.kafka.tools.ConsoleProducer; default_heap=-Xmx512M ;;
  kafka-console-consumer.sh) class=org.apache.kafka.tools.consumer.ConsoleConsumer; default_heap=-Xmx512M ;;
  kafka-consumer-groups.sh) class=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  kafka-get-offsets.sh) class=org.apache.kafka.tools.GetOffsetShell ;;
  kafka-transactions.sh) class=org.apache.kafka.tools.TransactionsCommand ;;
  kafka-metadata-quorum.sh) class=org.apache.kafka.tools.MetadataQuorumCommand ;;
  kafka-cluster.sh) class=org.apache.kafka.tools.ClusterTool ;;
  kafka-producer-perf-test.sh) class=org.apache.kafka.tools.ProducerPerformance; default_heap=-Xmx512M ;;
  kafka-consumer-perf-test.sh) class=org.apache.kafka.tools.ConsumerPerformance; default_heap=-Xmx512M ;;
  kafka-run-class.sh)
    [[ $# -ge 1 ]] || { echo "usage: $name <class> [args...]" >&2; exit 2; }
    class="$1"; shift ;;
  *) echo "$name: unknown Kafka command" >&2; exit 2 ;;
esac

# The server's heap comes from KAFKA_HEAP_OPTS when set, as in the distribution (its
# tools also inherit it: the official image behaves the same way).
heap="${KAFKA_HEAP_OPTS:-$default_heap}"
perf="${KAFKA_JVM_PERFORMANCE_OPTS:--server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true}"
log4j="${KAFKA_LOG4J_OPTS:--Dlog4j2.level=$log_level}"
# shellcheck disable=SC2086  # the *_OPTS variables are lists of JVM flags
exec java $heap $perf $log4j ${KAFKA_OPTS:-} -cp "/opt/kafka/libs/*" "$class" "$@"
