#!/usr/bin/env bash
# Print the absolute path of a `redis-server` binary on stdout (nothing else goes to stdout), installing Debian's
# `redis-server` package with apt-get when none is on PATH. The store tests (ldp-store, ldp-cli) start their own
# servers on free loopback ports with it; they never skip: if this fails they fail with its message.
#
#   REDIS=$(scripts/redis-server.sh) || exit 1
#
# - Idempotent; concurrent callers serialise on a flock so that only one runs apt-get.
# - Needs root (or passwordless sudo) and an apt mirror only when the package is missing.
set -euo pipefail

log() { printf 'redis-server.sh: %s\n' "$*" >&2; }
die() { printf 'redis-server.sh: ERROR: %s\n' "$*" >&2; exit 1; }

find_it() { command -v redis-server 2>/dev/null || { [ -x /usr/bin/redis-server ] && echo /usr/bin/redis-server; } || true; }

found=$(find_it)
if [ -z "$found" ]; then
    exec 9>"${TMPDIR:-/tmp}/ldp-redis-install.lock"
    flock 9
    found=$(find_it)
    if [ -z "$found" ]; then
        sudo=""
        if [ "$(id -u)" -ne 0 ]; then
            command -v sudo >/dev/null || die "redis-server is missing and installing it needs root (or sudo)"
            sudo="sudo -n"
        fi
        log "installing Debian's redis-server package"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get install -y --no-install-recommends redis-server >&2 \
            || { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends redis-server >&2; } \
            || die "apt-get could not install redis-server"
        # The package starts a system-wide server on 6379; the tests start their own and need none.
        { command -v systemctl >/dev/null && $sudo systemctl disable --now redis-server >&2; } 2>/dev/null || true
        { command -v service >/dev/null && $sudo service redis-server stop >&2; } 2>/dev/null || true
        found=$(find_it)
        [ -n "$found" ] || die "redis-server is still not on PATH after installing it"
    fi
fi
echo "$found"
