# shellcheck shell=bash
# Sourced by .ci/run before the tests: start a throwaway Redis server for the shared embedding
# cache tests (RedisByteStore, `pacms serve --workers 2 --cache-url`) and export
# PACMS_TEST_REDIS_URL. The server listens on 127.0.0.1:${PACMS_REDIS_PORT:-56379} (the next free
# port if that one is taken), keeps nothing on disk (no RDB snapshots, no append-only file), and
# is shut down when the sourcing shell exits; an EXIT trap set before (postgres.sh's) still runs.
#
#   - PACMS_TEST_REDIS_URL already set: that server is used, nothing is started.
#   - No redis-server: as root, `apt-get install -y redis-server`; otherwise a message, and the
#     Redis tests skip.
#   - A server that is installed but does not answer is an error (its log is printed).
#
# Try it: bash -c 'source .ci/redis.sh && redis-cli -u "$PACMS_TEST_REDIS_URL" ping'

_pacms_redis_port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

_pacms_redis_stop() {
    if [ -n "${_PACMS_REDIS_DIR:-}" ] && [ -d "$_PACMS_REDIS_DIR" ]; then
        redis-cli -h 127.0.0.1 -p "$_PACMS_REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
        rm -rf "$_PACMS_REDIS_DIR"
    fi
}

_pacms_redis_start() {
    local dir port previous tries
    if [ -n "${PACMS_TEST_REDIS_URL:-}" ]; then
        echo "redis.sh: using the server in PACMS_TEST_REDIS_URL"
        return 0
    fi
    if ! command -v redis-server >/dev/null 2>&1; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "redis.sh: redis-server not found (and not root with apt-get):" \
                "the Redis tests will be skipped" >&2
            return 0
        fi
        echo "redis.sh: installing redis-server with apt-get" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null \
            || { apt-get update -q >/dev/null \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null; } \
            || { echo "redis.sh: apt-get install redis-server failed" >&2; return 1; }
    fi
    port=${PACMS_REDIS_PORT:-56379}
    while ! _pacms_redis_port_free "$port"; do
        port=$((port + 1))
    done
    dir=$(mktemp -d "${TMPDIR:-/tmp}/pacms-redis.XXXXXX")
    _PACMS_REDIS_DIR=$dir
    _PACMS_REDIS_PORT=$port
    # Chain with the EXIT trap already set (postgres.sh's), rather than replace it.
    previous=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
    # shellcheck disable=SC2064  # expand $previous now
    trap "_pacms_redis_stop${previous:+; $previous}" EXIT
    if ! redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
            --dir "$dir" --logfile "$dir/server.log" --daemonize yes >/dev/null; then
        cat "$dir/server.log" >&2
        return 1
    fi
    tries=0
    until redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; do
        tries=$((tries + 1))
        if [ "$tries" -gt 100 ]; then
            cat "$dir/server.log" >&2
            return 1
        fi
        sleep 0.1
    done
    export PACMS_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
    echo "redis.sh: $(redis-server --version | awk '{print $3}') on 127.0.0.1:$port" \
        "(nothing on disk, shut down on exit)"
}

_pacms_redis_start
