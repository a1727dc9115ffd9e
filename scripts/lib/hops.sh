# shellcheck shell=bash
# Sourced by the benchmarks that read where a hop's time went (bench-kafka.sh,
# bench-latency.sh), so that both read the histograms alike.

# p50 and p99 of each part of vigil_record_hop_seconds in one service's metrics
# ($1 its name, $2 its metrics port; less those in the metrics file $3, taken
# earlier), as the upper bounds of the buckets they fall in; and its commits
# meanwhile, with their mean duration.
hops() {
  curl -s "127.0.0.1:$2/metrics" | awk -v stage="$1" -v base="$3" '
    /^vigil_transaction_commits_total[{ ]/ { commits += (FILENAME == base ? -$NF : $NF) }
    /^vigil_transaction_commit_seconds_sum[{ ]/ { took += (FILENAME == base ? -$NF : $NF) }
    /^vigil_record_hop_seconds_bucket/ {
      match($0, /part="[a-z_]*"/); part = substr($0, RSTART + 6, RLENGTH - 7)
      match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5)
      if (FILENAME == base) { before[part, le] = $NF; next }
      n[part]++; bound[part, n[part]] = le; count[part, n[part]] = $NF - before[part, le]
    }
    END {
      line = stage ":"
      split("queued processing commit_wait", parts, " ")
      for (k = 1; k <= 3; k++) {
        part = parts[k]; total = count[part, n[part]]
        if (total == 0) continue
        p50 = p99 = ""
        for (i = 1; i <= n[part]; i++) {
          if (p50 == "" && count[part, i] >= 0.5 * total) p50 = bound[part, i]
          if (p99 == "" && count[part, i] >= 0.99 * total) p99 = bound[part, i]
        }
        line = line sprintf(" %s p50 <= %s s, p99 <= %s s;", part, p50, p99)
      }
      print line sprintf(" %d commits, mean %.0f ms", commits, commits ? 1000 * took / commits : 0)
    }' "$3" -
}
