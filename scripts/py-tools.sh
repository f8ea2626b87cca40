#!/usr/bin/env bash
# Install the Python tools the tests check against into a private venv under target/ and print that venv's python
# on stdout (logs go to stderr): SciPy (the reference for `ldp_router::stats`) and the Prometheus Python client (its
# OpenMetrics parser reads what `/metrics` serves). See scripts/lib/venv.sh for the guarantees.
#
#   PY=$(scripts/py-tools.sh) || exit 1
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"

SPEC=(scipy==1.15.3 prometheus-client==0.26.0)
venv_install py-tools-venv "${SPEC[*]}" 'import scipy.stats, prometheus_client.openmetrics.parser' "${SPEC[@]}"
