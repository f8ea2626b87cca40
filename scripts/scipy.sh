#!/usr/bin/env bash
# Install SciPy (the reference the statistics of `ldp_router::stats` are checked against) into a private venv under
# target/ and print that venv's python on stdout (logs go to stderr). Idempotent and safe for concurrent callers
# (flock); exits non-zero with a message when anything fails, so callers never skip silently.
#
#   PY=$(scripts/scipy.sh) || exit 1
set -euo pipefail

SPEC='scipy==1.15.3'
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/target/scipy-venv"
VPY="$VENV/bin/python"
MARKER="$VENV/.installed"
HOST_PY="${LDP_REF_PYTHON:-python3}"

die() { printf 'scipy.sh: ERROR: %s\n' "$*" >&2; exit 1; }
installed() { [ -x "$VPY" ] && [ "$(cat "$MARKER" 2>/dev/null)" = "$SPEC" ] && "$VPY" -c 'import scipy.stats' >/dev/null 2>&1; }

mkdir -p "$REPO/target"
exec 9>"$REPO/target/scipy-venv.lock"
flock -w 900 9 || die "timed out waiting for the lock"
if installed; then
    printf '%s\n' "$VPY"
    exit 0
fi
printf 'scipy.sh: installing %s into %s (one-off)\n' "$SPEC" "$VENV" >&2
rm -rf "$VENV"
"$HOST_PY" -m venv "$VENV" >&2 || die "could not create a venv with $HOST_PY (on Debian: apt-get install python3-venv)"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$VPY" -m pip install --timeout 60 --retries 5 "$SPEC" >&2 || die "pip install $SPEC failed"
printf '%s' "$SPEC" >"$MARKER"
installed || die "installed, but 'import scipy.stats' fails"
printf '%s\n' "$VPY"
