#!/usr/bin/env bash
# Install the OAuth 2.0 authorization server the JWT tests run against (scripts/auth_server.py: Authlib's
# authorization server on Flask, issuing RS256 and ES256 access tokens by client credentials, serving JWKS and OIDC
# discovery, rotating keys on request) into a private venv under target/ and print that venv's python on stdout
# (logs go to stderr). See scripts/lib/venv.sh for the guarantees.
#
#   PY=$(scripts/auth-server.sh) || exit 1
#   "$PY" scripts/auth_server.py --audience https://ldp.test   # prints {"url": ...} once it listens
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/venv.sh"

SPEC=(Authlib==1.9.10 Flask==3.1.3)
venv_install auth-server-venv "${SPEC[*]}" 'import authlib.oauth2.rfc6749, authlib.jose, flask' "${SPEC[@]}"
