#!/usr/bin/env bash
# Install the Python reference SDK (PyPI `ldp-protocol[server]==0.2.0`) into a private venv under target/ and print
# the absolute path of that venv's python on stdout (logs go to stderr). See scripts/lib/venv.sh for the guarantees.
#
#   PY=$(scripts/ref-sdk.sh) || exit 1
#
# Transitive dependencies are pinned by scripts/ref-sdk-constraints.txt so that every machine serialises exactly the
# same bytes; editing that file triggers a reinstall (its checksum is part of the marker).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"

VERSION=0.2.0
CONSTRAINTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ref-sdk-constraints.txt"
[ -f "$CONSTRAINTS" ] || { echo "ref-sdk.sh: ERROR: missing $CONSTRAINTS" >&2; exit 1; }
CHECK="import sys, ldp_protocol, starlette, uvicorn, httpx; sys.exit(ldp_protocol.__version__ != '$VERSION')"
venv_install ref-venv "ldp-protocol==$VERSION constraints=$(sha256sum "$CONSTRAINTS" | cut -d' ' -f1)" "$CHECK" \
    -c "$CONSTRAINTS" "ldp-protocol[server]==$VERSION"
