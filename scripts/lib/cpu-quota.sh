# shellcheck shell=bash
# Sourced by the benchmarks that run the broker as on a slower host: a CPU quota on
# one running process (and every thread it starts later), through a cgroup of its own.
# cgroup v1's cpu controller (cpu.cfs_quota_us) where it is mounted, else cgroup v2's
# cpu.max; both need write access to the cgroup file system (root, or a delegated
# subtree). Where neither is there, `systemd-run --scope -p CPUQuota=…` around the
# broker's start does the same.

CPU_QUOTA_GROUP=""

# cpu_quota_apply PID PERCENT: at most PERCENT % of one core for PID (200 = two cores),
# over periods of 10 ms: a throttled process stops for the rest of a period once it
# has used its share, and at the usual 100 ms a request arriving then would wait up
# to 90 ms, a stall no slow CPU makes.
cpu_quota_apply() {
  local pid=$1 percent=$2 period=10000 group
  if [[ -w /sys/fs/cgroup/cpu/cgroup.procs ]]; then
    group="/sys/fs/cgroup/cpu/vigil-quota-$pid"
    mkdir -p "$group"
    echo "$period" >"$group/cpu.cfs_period_us"
    echo $((period * percent / 100)) >"$group/cpu.cfs_quota_us"
  elif [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
    group="/sys/fs/cgroup/vigil-quota-$pid"
    mkdir -p "$group"
    echo "$((period * percent / 100)) $period" >"$group/cpu.max"
  else
    echo "cpu-quota: no writable cgroup cpu controller here (cgroup v1 /sys/fs/cgroup/cpu or v2" \
      "/sys/fs/cgroup with cpu): run as root, or start the broker under" \
      "systemd-run --scope -p CPUQuota=${percent}%" >&2
    return 1
  fi
  echo "$pid" >"$group/cgroup.procs"
  CPU_QUOTA_GROUP=$group
}

# CPU time the throttled group spent waiting for its quota so far, in seconds.
cpu_quota_throttled_seconds() {
  [[ -n "$CPU_QUOTA_GROUP" ]] || { echo 0; return; }
  awk '/^throttled_time / { printf "%.1f", $2 / 1e9 } /^throttled_usec / { printf "%.1f", $2 / 1e6 }' \
    "$CPU_QUOTA_GROUP/cpu.stat"
}

# Moves what is left in the group back to the root and removes the group.
cpu_quota_release() {
  [[ -n "$CPU_QUOTA_GROUP" && -d "$CPU_QUOTA_GROUP" ]] || return 0
  local root pid
  root=$(dirname "$CPU_QUOTA_GROUP")
  while read -r pid; do echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true; done <"$CPU_QUOTA_GROUP/cgroup.procs"
  rmdir "$CPU_QUOTA_GROUP" 2>/dev/null || true
  CPU_QUOTA_GROUP=""
}
