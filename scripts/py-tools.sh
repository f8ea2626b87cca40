#!/usr/bin/env bash
# Install the Python tools the tests check against into a private venv under target/ and print that venv's python
# on stdout (logs go to stderr): SciPy (the reference for `ldp_router::stats`) and the Prometheus Python client (its
# OpenMetrics parser reads what `/metrics` serves). Idempotent and safe for concurrent callers (flock); exits
# non-zero with a message when anything fails, so callers never skip silently.
#
#   PY=$(scripts/py-tools.sh) || exit 1
set -euo pipefail

SPEC='scipy==1.15.3 prometheus-client==0.26.0'
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/target/py-tools-venv"
VPY="$VENV/bin/python"
MARKER="$VENV/.installed"
HOST_PY="${LDP_REF_PYTHON:-python3}"

die() { printf 'py-tools.sh: ERROR: %s\n' "$*" >&2; exit 1; }
installed() {
    [ -x "$VPY" ] && [ "$(cat "$MARKER" 2>/dev/null)" = "$SPEC" ] &&
        "$VPY" -c 'import scipy.stats, prometheus_client.openmetrics.parser' >/dev/null 2>&1
}

mkdir -p "$REPO/target"
exec 9>"$REPO/target/py-tools-venv.lock"
flock -w 900 9 || die "timed out waiting for the lock"
if installed; then
    printf '%s\n' "$VPY"
    exit 0
fi
printf 'py-tools.sh: installing %s into %s (one-off)\n' "$SPEC" "$VENV" >&2
rm -rf "$VENV"
"$HOST_PY" -m venv "$VENV" >&2 || die "could not create a venv with $HOST_PY (on Debian: apt-get install python3-venv)"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VPY" -m pip install --timeout 60 --retries 5 $SPEC >&2 || die "pip install $SPEC failed"
printf '%s' "$SPEC" >"$MARKER"
installed || die "installed, but importing scipy or prometheus_client fails"
printf '%s\n' "$VPY"
