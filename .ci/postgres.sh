# shellcheck shell=bash
# Sourced by .ci/run before the tests: start a throwaway PostgreSQL server for the PostgresStore
# tests and export PACMS_TEST_POSTGRES_URI. The server listens on 127.0.0.1:${PACMS_PG_PORT:-55432}
# (the next free port if that one is taken), keeps its socket and data in a temp dir, and is
# stopped and removed when the sourcing shell exits.
#
#   - PACMS_TEST_POSTGRES_URI already set: that server is used, nothing is started.
#   - No initdb under /usr/lib/postgresql/*/bin: as root, `apt-get install -y postgresql`;
#     otherwise a message, and the PostgreSQL tests skip.
#   - As root the server runs as the `postgres` user (runuser, else su); otherwise as yourself.
#   - A server that is installed but fails to start is an error (its log is printed).
#
# Try it: bash -c 'source .ci/postgres.sh && psql "$PACMS_TEST_POSTGRES_URI" -c "select 1"'

_pacms_pg_bindir() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [ -x "$dir/initdb" ] && echo "$dir"
    done | sort -V | tail -n 1
}

_pacms_pg_as() {  # run a command as the server's owner
    if [ "$(id -u)" -ne 0 ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u postgres -- "$@"
    else
        su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
    fi
}

_pacms_pg_port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

_pacms_pg_stop() {
    if [ -n "${_PACMS_PG_DIR:-}" ] && [ -d "$_PACMS_PG_DIR" ]; then
        _pacms_pg_as "$_PACMS_PG_BIN/pg_ctl" -D "$_PACMS_PG_DIR/data" -m fast -w stop \
            >/dev/null 2>&1 || true
        rm -rf "$_PACMS_PG_DIR"
    fi
}

_pacms_pg_start() {
    local bin dir port
    if [ -n "${PACMS_TEST_POSTGRES_URI:-}" ]; then
        echo "postgres.sh: using the server in PACMS_TEST_POSTGRES_URI"
        return 0
    fi
    bin=$(_pacms_pg_bindir)
    if [ -z "$bin" ]; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            echo "postgres.sh: PostgreSQL not found (and not root with apt-get):" \
                "the PostgreSQL tests will be skipped" >&2
            return 0
        fi
        echo "postgres.sh: installing postgresql with apt-get" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null \
            || { apt-get update -q >/dev/null \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null; } \
            || { echo "postgres.sh: apt-get install postgresql failed" >&2; return 1; }
        bin=$(_pacms_pg_bindir)
    fi
    port=${PACMS_PG_PORT:-55432}
    while ! _pacms_pg_port_free "$port"; do
        port=$((port + 1))
    done
    dir=$(mktemp -d "${TMPDIR:-/tmp}/pacms-pg.XXXXXX")
    [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
    _PACMS_PG_DIR=$dir
    _PACMS_PG_BIN=$bin
    trap _pacms_pg_stop EXIT
    if ! _pacms_pg_as "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
            --no-locale >"$dir/initdb.log" 2>&1; then
        cat "$dir/initdb.log" >&2
        return 1
    fi
    if ! _pacms_pg_as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off" start >/dev/null; then
        cat "$dir/server.log" >&2
        return 1
    fi
    _pacms_pg_as "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres pacms_test || return 1
    export PACMS_TEST_POSTGRES_URI="postgresql://postgres@127.0.0.1:$port/pacms_test"
    echo "postgres.sh: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on" \
        "127.0.0.1:$port (data in $dir, stopped on exit)"
}

_pacms_pg_start
