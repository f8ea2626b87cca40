#!/usr/bin/env bash
# Install the other protocols' official Python SDKs, which the bridge tests use as real third-party clients and
# servers, into a private venv under target/ and print that venv's python on stdout (logs go to stderr): the MCP
# Python SDK (`mcp` on PyPI) and the A2A Python SDK (`a2a-sdk`). Idempotent and safe for concurrent callers (flock);
# exits non-zero with a message when anything fails, so callers never skip silently.
#
#   PY=$(scripts/bridge-sdks.sh) || exit 1
set -euo pipefail

SPEC='mcp==2.3.0 a2a-sdk[http-server]==1.3.0'
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/target/bridge-venv"
VPY="$VENV/bin/python"
MARKER="$VENV/.installed"
HOST_PY="${LDP_REF_PYTHON:-python3}"

die() { printf 'bridge-sdks.sh: ERROR: %s\n' "$*" >&2; exit 1; }
installed() {
    [ -x "$VPY" ] && [ "$(cat "$MARKER" 2>/dev/null)" = "$SPEC" ] &&
        "$VPY" -c 'import mcp, mcp.client.stdio, a2a' >/dev/null 2>&1
}

mkdir -p "$REPO/target"
exec 9>"$REPO/target/bridge-venv.lock"
flock -w 900 9 || die "timed out waiting for the lock"
if installed; then
    printf '%s\n' "$VPY"
    exit 0
fi
printf 'bridge-sdks.sh: installing %s into %s (one-off)\n' "$SPEC" "$VENV" >&2
rm -rf "$VENV"
"$HOST_PY" -m venv "$VENV" >&2 || die "could not create a venv with $HOST_PY (on Debian: apt-get install python3-venv)"
# shellcheck disable=SC2086 # SPEC is a list of requirements.
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VPY" -m pip install --timeout 60 --retries 5 $SPEC >&2 || die "pip install $SPEC failed"
printf '%s' "$SPEC" >"$MARKER"
installed || die "installed, but importing mcp or a2a fails"
printf '%s\n' "$VPY"
