#!/usr/bin/env bash
# Entrypoint of the local apicurio/apicurio-registry stand-in, after the official
# image's run-java.sh (UBI OpenJDK): JAVA_OPTS (or the image's JAVA_OPTIONS), then
# JAVA_OPTS_APPEND, then the Quarkus runner jar from JAVA_APP_DIR. Quarkus itself
# reads QUARKUS_* variables (QUARKUS_HTTP_PORT ...). exec: java is PID 1 and gets
# SIGTERM directly.
set -euo pipefail
cd "${JAVA_APP_DIR:=/deployments}"
jar=""
for candidate in "$JAVA_APP_DIR"/*-runner.jar "$JAVA_APP_DIR"/quarkus-app/quarkus-run.jar \
    "$JAVA_APP_DIR"/quarkus-run.jar; do
  [[ -f "$candidate" ]] && { jar="$candidate"; break; }
done
[[ -n "$jar" ]] || { echo "run-java.sh: no runnable jar in $JAVA_APP_DIR" >&2; exit 1; }
# shellcheck disable=SC2086  # the *OPTS* variables are lists of JVM flags
exec java ${JAVA_OPTS:-${JAVA_OPTIONS:-}} -XX:MaxRAMPercentage=50.0 -XX:+ExitOnOutOfMemoryError \
  ${JAVA_OPTS_APPEND:-} -jar "$jar" "$@"
