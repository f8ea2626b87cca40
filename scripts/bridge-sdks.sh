#!/usr/bin/env bash
# Install the other protocols' official Python SDKs, which the bridge tests use as real third-party clients and
# servers, into a private venv under target/ and print that venv's python on stdout (logs go to stderr): the MCP
# Python SDK (`mcp` on PyPI) and the A2A Python SDK (`a2a-sdk`). See scripts/lib/venv.sh for the guarantees.
#
#   PY=$(scripts/bridge-sdks.sh) || exit 1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"

SPEC=(mcp==2.3.0 'a2a-sdk[http-server]==1.3.0')
venv_install bridge-venv "${SPEC[*]}" 'import mcp, mcp.client.stdio, a2a' "${SPEC[@]}"
