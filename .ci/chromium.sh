# shellcheck shell=bash
# Sourced by .ci/run before the tests: make sure a headless Chromium exists for the inspector's
# browser test (tests/integration_tests/test_server_browser.py). As root with apt-get, Debian's
# `chromium` package is installed when no chromium binary is found; otherwise a message, and the
# browser test skips with its reason. PACMS_CHROMIUM may name the binary to use.

_pacms_chromium_find() {
    local name
    for name in "${PACMS_CHROMIUM:-}" chromium chromium-browser google-chrome; do
        [ -n "$name" ] && command -v "$name" >/dev/null 2>&1 && { command -v "$name"; return 0; }
    done
    return 1
}

if ! _pacms_chromium_find >/dev/null; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "chromium.sh: installing chromium with apt-get" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
            || { apt-get update -q >/dev/null \
                 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } \
            || echo "chromium.sh: apt-get install chromium failed; the browser test will skip" >&2
    else
        echo "chromium.sh: no chromium (and not root with apt-get): the browser test will skip" >&2
    fi
fi
if _pacms_chromium_find >/dev/null; then
    PACMS_CHROMIUM=$(_pacms_chromium_find)
    export PACMS_CHROMIUM
    echo "chromium.sh: using $PACMS_CHROMIUM"
fi
