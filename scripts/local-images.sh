#!/usr/bin/env bash
# Builds the local stand-in images that deploy/local-images/compose.override.yml
# points docker-compose.yml at, for machines that reach no container registry:
#
#   localhost/vigil-base:bookworm           Debian bookworm minbase (debootstrap), curl, wget
#   localhost/vigil-rust:bookworm           base + C toolchain + the host's Rust toolchain
#   localhost/vigil-jre:17                  base + a jlink-ed JRE from the host's JDK
#   localhost/vigil-kafka:4.4.0             stands in for apache/kafka:4.4.0
#   localhost/vigil-apicurio-registry:3.0.9 stands in for apicurio/apicurio-registry:3.0.9
#   localhost/vigil-prometheus:2.42         stands in for prom/prometheus (Debian's 2.42)
#   localhost/vigil-alertmanager:0.25       stands in for prom/alertmanager (Debian's 0.25)
#
#   scripts/local-images.sh [IMAGE...]   build what is missing or whose inputs changed
#                                        (IMAGE: base rust jre kafka registry prometheus
#                                        alertmanager;
#                                        default all)
#   scripts/local-images.sh list         the images, their sizes and ages
#
# Each image carries a label with the hash of its inputs (its Dockerfile and files,
# its parent image, the versions it packages); an image whose label matches is kept,
# so a second run takes seconds. FORCE=1 rebuilds anyway. Kafka and the registry come
# from Maven Central through scripts/local-stack.sh's fetch (its cache, .cache/).
# Needs podman (scripts/container-host.sh install), debootstrap, a JDK 17+ with jlink,
# and a Rust toolchain >= 1.88 on the host.
#
# Env: VIGIL_CACHE (default $HOME/.cache/vigil): the debootstrapped root file system
#      and build contexts; DEBIAN_MIRROR; VIGIL_RUST_SYSROOT (default `rustc --print
#      sysroot`); VIGIL_JDK_HOME (default: the JDK of `javac` on PATH).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$ROOT/deploy/local-images"
CACHE="${VIGIL_CACHE:-$HOME/.cache/vigil}"
CONTEXTS="$CACHE/image-contexts"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
LABEL=dev.vigil.inputs

BASE=localhost/vigil-base:bookworm
RUST=localhost/vigil-rust:bookworm
JRE=localhost/vigil-jre:17
KAFKA=localhost/vigil-kafka:4.4.0
REGISTRY=localhost/vigil-apicurio-registry:3.0.9
PROMETHEUS=localhost/vigil-prometheus:2.42
ALERTMANAGER=localhost/vigil-alertmanager:0.25

# What the stand-ins' entrypoints and healthchecks use, besides minbase.
BASE_PACKAGES=ca-certificates,curl,wget
# The JRE runs Kafka (broker and tools) and Apicurio Registry (Quarkus): Java SE, plus
# the JDK modules they load (Unsafe, EC crypto, zip file systems, DNS, management).
JRE_MODULES=java.se,jdk.unsupported,jdk.crypto.ec,jdk.zipfs,jdk.naming.dns,jdk.management,jdk.security.auth,jdk.localedata
RUST_MIN=1.88

log() { printf 'local-images: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

sha() { sha256sum | cut -c1-64; }
files_sha() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha; }
image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
image_inputs() { podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$1" 2>/dev/null || true; }
up_to_date() {
  [[ -z "${FORCE:-}" && -n "$2" && "$(image_inputs "$1")" == "$2" ]] || return 1
  log "$1: up to date"
}
need_image() { [[ -n "$(image_id "$1")" ]] || die "$1 is missing: build it first"; }

# podman build with the inputs label; never pulls (every parent is local).
build() {
  local image="$1" inputs="$2" context="$3"; shift 3
  podman build --pull=never --layers --label "$LABEL=$inputs" -t "$image" "$@" "$context" >&2
}

# --- base: Debian minbase, imported ---------------------------------------------------
# Conventions of Debian's container images, applied to the fresh root file system.
prepare_rootfs() {
  local r="$1"
  rm -f "$r/etc/apt/sources.list"
  cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # Small images: no recommends, no docs or man pages, no cached packages.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$r/etc/apt/apt.conf.d/90-container"
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
    >"$r/etc/dpkg/dpkg.cfg.d/90-container"
  printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
    >"$r/etc/apt/apt.conf.d/90-container-clean"
  # Packages that ship a service (prometheus) must not start it during a build.
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"
  chmod 0755 "$r/usr/sbin/policy-rc.d"
  rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
    "$r"/var/log/* "$r"/tmp/* "$r/etc/hostname"
  : >"$r/etc/resolv.conf"   # Podman mounts its own
}

build_base() {
  local inputs rootfs="$CACHE/rootfs-$SUITE"
  inputs="$( { echo "$SUITE $MIRROR $BASE_PACKAGES"; declare -f prepare_rootfs; } | sha)"
  up_to_date "$BASE" "$inputs" && return 0
  # The root file system is kept in the cache: re-importing it takes seconds,
  # debootstrap a minute.
  if [[ "$(cat "$rootfs.inputs" 2>/dev/null)" != "$inputs" ]]; then
    command -v debootstrap >/dev/null || die "debootstrap not found (scripts/container-host.sh install)"
    [[ $EUID -eq 0 ]] || die "debootstrap needs root"
    rm -rf "$rootfs" "$rootfs.tmp" "$rootfs.inputs"
    mkdir -p "$CACHE"
    log "debootstrap $SUITE (minbase + $BASE_PACKAGES)..."
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs.tmp" "$MIRROR" \
      >"$CACHE/debootstrap.log" 2>&1 || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap failed"; }
    prepare_rootfs "$rootfs.tmp"
    mv "$rootfs.tmp" "$rootfs"
    echo "$inputs" >"$rootfs.inputs"
  fi
  log "importing $BASE ($(du -sh "$rootfs" | cut -f1))..."
  tar --numeric-owner -C "$rootfs" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' --change "LABEL $LABEL=$inputs" - "$BASE" >/dev/null
}

# --- rust: the builder RUST_IMAGE points to ------------------------------------------
build_rust() {
  need_image "$BASE"
  local sysroot version inputs ctx="$CONTEXTS/rust" ca_sha=""
  sysroot="${VIGIL_RUST_SYSROOT:-$(rustc --print sysroot)}"
  [[ -x "$sysroot/bin/rustc" && -x "$sysroot/bin/cargo" ]] || die "no rustc and cargo in $sysroot"
  version="$("$sysroot/bin/rustc" --version | cut -d' ' -f2)"
  [[ "$(printf '%s\n' "$RUST_MIN" "${version%%-*}" | sort -V | head -n1)" == "$RUST_MIN" ]] \
    || die "Rust $version in $sysroot is older than $RUST_MIN"
  if [[ -d /usr/local/share/ca-certificates ]]; then ca_sha="$(files_sha /usr/local/share/ca-certificates)"; fi
  inputs="$( { image_id "$BASE"; files_sha "$HERE/rust"; "$sysroot/bin/rustc" -vV
    "$sysroot/bin/cargo" -V; echo "$ca_sha"; } | sha)"
  up_to_date "$RUST" "$inputs" && return 0
  log "assembling the Rust builder's context (Rust $version from $sysroot)..."
  rm -rf "$ctx" && mkdir -p "$ctx/ca"
  cp "$HERE/rust/Dockerfile" "$ctx/"
  if [[ -d /usr/local/share/ca-certificates ]]; then
    find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$ctx/ca/" \;
  fi
  touch "$ctx/ca/.keep"
  # Hard links where possible (same file system): no 600 MB copy. No docs, no sources.
  cp -al "$sysroot" "$ctx/toolchain" 2>/dev/null || cp -a "$sysroot" "$ctx/toolchain"
  rm -rf "$ctx/toolchain/share" "$ctx/toolchain/lib/rustlib/src" "$ctx/toolchain/lib/rustlib/rustc-src"
  build "$RUST" "$inputs" "$ctx" --build-arg "BASE_IMAGE=$BASE"
  rm -rf "$ctx"
}

# --- jre: common parent of the Java stand-ins -----------------------------------------
build_jre() {
  need_image "$BASE"
  local jdk inputs ctx="$CONTEXTS/jre"
  if [[ -n "${VIGIL_JDK_HOME:-}" ]]; then jdk="$VIGIL_JDK_HOME"
  else jdk="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")" || die "no javac on PATH"; fi
  [[ -x "$jdk/bin/jlink" ]] || die "no jlink in $jdk (set VIGIL_JDK_HOME to a JDK 17+)"
  inputs="$( { image_id "$BASE"; files_sha "$HERE/jre"; "$jdk/bin/jlink" --version; echo "$JRE_MODULES"; } | sha)"
  up_to_date "$JRE" "$inputs" && return 0
  log "jlink: a JRE from $jdk ($("$jdk/bin/jlink" --version))..."
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp "$HERE/jre/Dockerfile" "$ctx/"
  "$jdk/bin/jlink" --add-modules "$JRE_MODULES" --strip-debug --no-man-pages --no-header-files \
    --compress=2 --output "$ctx/jre"
  build "$JRE" "$inputs" "$ctx" --build-arg "BASE_IMAGE=$BASE"
  rm -rf "$ctx"
}

# Kafka's jars and Apicurio come from Maven Central, fetched once by local-stack.sh
# into its cache; the pom pins their versions, so its hash stands for them (no fetch
# is needed to see that an image is up to date).
fetch_jars() { "$ROOT/scripts/local-stack.sh" fetch; }
pom_sha() { sha256sum "$ROOT/deploy/local-stack/pom.xml" | cut -c1-64; }

build_java_standin() {
  local image="$1" dir="$2" what="$3" inputs ctx="$CONTEXTS/$2"
  need_image "$JRE"
  inputs="$( { image_id "$JRE"; files_sha "$HERE/$dir"; pom_sha; } | sha)"
  up_to_date "$image" "$inputs" && return 0
  fetch_jars
  rm -rf "$ctx" && mkdir -p "$ctx"
  cp -a "$HERE/$dir/." "$ctx/"
  cp -al "$ROOT/.cache/local-stack/$what" "$ctx/$what" 2>/dev/null \
    || cp -a "$ROOT/.cache/local-stack/$what" "$ctx/$what"
  build "$image" "$inputs" "$ctx" --build-arg "BASE_IMAGE=$JRE"
  rm -rf "$ctx"
}
build_kafka() { build_java_standin "$KAFKA" kafka kafka-libs; }
build_registry() { build_java_standin "$REGISTRY" apicurio-registry registry; }

# A Debian package on the base, laid out as its official image ($1 image, $2 folder).
build_debian_standin() {
  need_image "$BASE"
  local inputs
  inputs="$( { image_id "$BASE"; files_sha "$HERE/$2"; } | sha)"
  up_to_date "$1" "$inputs" && return 0
  build "$1" "$inputs" "$HERE/$2" --build-arg "BASE_IMAGE=$BASE"
}
build_prometheus() { build_debian_standin "$PROMETHEUS" prometheus; }
build_alertmanager() { build_debian_standin "$ALERTMANAGER" alertmanager; }

list() {
  podman images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}\t{{.CreatedSince}}' \
    | grep -E '^localhost/vigil-' | sort || true
}

timed() {
  local t0=$SECONDS
  "build_$1"
  log "$1: $((SECONDS - t0)) s"
}

command -v podman >/dev/null || die "podman not found (scripts/container-host.sh install)"
case "${1:-all}" in
  list) list; exit 0 ;;
  all) set -- base rust jre kafka registry prometheus alertmanager ;;
esac
t0=$SECONDS
for image in "$@"; do
  case "$image" in
    base | rust | jre | kafka | registry | prometheus | alertmanager) timed "$image" ;;
    *) die "unknown image '$image' (base rust jre kafka registry prometheus alertmanager, or list)" ;;
  esac
done
log "done in $((SECONDS - t0)) s"
list
