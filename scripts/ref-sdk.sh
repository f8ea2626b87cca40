#!/usr/bin/env bash
# Install the Python reference SDK (PyPI `ldp-protocol[server]==0.2.0`) into a private venv under
# target/ and print the absolute path of that venv's python on stdout (nothing else goes to stdout;
# all logs go to stderr).
#
#   PY=$(scripts/ref-sdk.sh) || exit 1
#
# - Idempotent: a marker file records what was installed; a second run only checks it.
# - Concurrency-safe: concurrent callers (e.g. parallel cargo tests) serialise on a flock under target/.
# - Needs only python3 (>= 3.10, override with $LDP_REF_PYTHON) and access to PyPI.
# - Exits non-zero with a message on stderr if anything fails: callers must not skip silently.
# - Transitive dependencies are pinned by scripts/ref-sdk-constraints.txt so that every machine
#   serialises exactly the same bytes; editing that file triggers a reinstall.
set -euo pipefail

SDK_SPEC='ldp-protocol[server]==0.2.0'
SDK_VERSION='0.2.0'

log() { printf 'ref-sdk: %s\n' "$*" >&2; }
die() { printf 'ref-sdk: ERROR: %s\n' "$*" >&2; exit 1; }

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
TARGET="$REPO/target"
VENV="$TARGET/ref-venv"
VPY="$VENV/bin/python"
MARKER="$VENV/.ldp-ref-sdk-installed"
LOCK="$TARGET/ref-venv.lock"
CONSTRAINTS="$SCRIPT_DIR/ref-sdk-constraints.txt"
HOST_PY="${LDP_REF_PYTHON:-python3}"

[ -f "$CONSTRAINTS" ] || die "missing $CONSTRAINTS"
command -v flock >/dev/null 2>&1 || die "flock(1) not found (util-linux)"

# What the marker must say for the venv to count as installed.
constraints_sum() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$CONSTRAINTS" | cut -d' ' -f1
    else
        cksum "$CONSTRAINTS" | cut -d' ' -f1
    fi
}
WANT="ldp-protocol==$SDK_VERSION constraints=$(constraints_sum)"

is_installed() {
    [ -x "$VPY" ] && [ -f "$MARKER" ] && [ "$(cat "$MARKER" 2>/dev/null)" = "$WANT" ] &&
        "$VPY" -c 'import ldp_protocol, starlette, uvicorn, httpx, sys; sys.exit(0 if ldp_protocol.__version__ == "'"$SDK_VERSION"'" else 1)' \
            >/dev/null 2>&1
}

mkdir -p "$TARGET"
exec 9>"$LOCK"
if ! flock -w 900 9; then
    die "timed out after 900s waiting for the lock $LOCK"
fi

if is_installed; then
    printf '%s\n' "$VPY"
    exit 0
fi

command -v "$HOST_PY" >/dev/null 2>&1 || die "'$HOST_PY' not found; install Python >= 3.10 or set LDP_REF_PYTHON"
"$HOST_PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' ||
    die "$HOST_PY is $("$HOST_PY" -V 2>&1); ldp-protocol 0.2.0 needs Python >= 3.10"

log "installing $SDK_SPEC into $VENV (one-off)"
rm -rf "$VENV"

# Prefer a venv with its own pip; fall back to driving the host pip at a pip-less venv
# (Debian's python3 without python3-venv has no ensurepip).
PIP=()
if "$HOST_PY" -m venv "$VENV" >&2 2>&1; then
    PIP=("$VPY" -m pip)
else
    log "python3 -m venv with pip failed; retrying --without-pip and the host's pip"
    rm -rf "$VENV"
    "$HOST_PY" -m venv --without-pip "$VENV" >&2 ||
        die "could not create a venv with $HOST_PY (on Debian: apt-get install python3-venv)"
    "$HOST_PY" -m pip --version >/dev/null 2>&1 ||
        die "the venv has no pip and $HOST_PY has no pip either (on Debian: apt-get install python3-venv or python3-pip)"
    PIP=("$HOST_PY" -m pip --python "$VPY")
fi

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_WARN_SCRIPT_LOCATION=1
if ! "${PIP[@]}" install --timeout 60 --retries 5 -c "$CONSTRAINTS" "$SDK_SPEC" >&2; then
    rm -rf "$VENV"
    die "pip install $SDK_SPEC failed (is PyPI reachable?)"
fi

printf '%s' "$WANT" >"$MARKER.tmp"
if ! is_installed_check=$( "$VPY" -c 'import ldp_protocol, starlette, uvicorn, httpx; print(ldp_protocol.__version__)' 2>&1 ); then
    rm -f "$MARKER.tmp"
    die "installed, but importing the SDK fails: $is_installed_check"
fi
[ "$is_installed_check" = "$SDK_VERSION" ] || { rm -f "$MARKER.tmp"; die "installed ldp_protocol reports version $is_installed_check, expected $SDK_VERSION"; }
mv -f "$MARKER.tmp" "$MARKER"
log "installed ldp-protocol $SDK_VERSION"
printf '%s\n' "$VPY"
