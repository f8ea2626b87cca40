"""An OAuth 2.0 authorization server for the JWT tests, built on Authlib (its Flask authorization server and the
client credentials grant) and joserfc (Authlib's JOSE library): it issues JWT access tokens (RFC 9068 shape)
signed RS256 or ES256, serves its JWK Set and OIDC/RFC 8414 discovery documents, and rotates keys on request.

Installed and run by the tests through scripts/auth-server.sh; prints one JSON line, {"url": ...}, once it listens.

    python scripts/auth_server.py --audience https://ldp.test --client agent:agent-secret:"ldp:call mcp:tools"

Admin endpoints (tests only; this server is never for production):
    POST /admin/rotate  {"alg": "RS256"|"ES256"}  a new signing key, published beside the old ones  -> {"kid"}
    POST /admin/retire  {"kid": ...}              the key leaves the JWK Set
    POST /admin/mint    {"claims": {...}, "forge": null|"none"|"hs256-public-key", "kid": ...}
        a token with these claims over the defaults (exp/nbf/iat as offsets from now: "exp_in", "nbf_in"),
        signed by the current key, or forged the ways attackers do                                  -> {"token"}
"""

import argparse
import base64
import hashlib
import hmac
import json
import sys
import threading
import time
import uuid

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from flask import Flask, jsonify, request
from joserfc import jwk, jwt
from werkzeug.serving import make_server


class Client(ClientMixin):
    """A confidential client allowed the client credentials grant and the scopes it was given."""

    def __init__(self, client_id, secret, scopes):
        self.client_id = client_id
        self.secret = secret
        self.scopes = set(scopes.split())

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        if not scope:
            return " ".join(sorted(self.scopes))
        asked = scope.split()
        return " ".join(s for s in asked if s in self.scopes)

    def check_redirect_uri(self, redirect_uri):
        return False

    def check_client_secret(self, client_secret):
        return hmac.compare_digest(self.secret, client_secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type):
        return False

    def check_grant_type(self, grant_type):
        return grant_type == "client_credentials"


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--audience", required=True, help="aud of tokens that ask for no resource")
    parser.add_argument("--ttl", type=int, default=300, help="access token lifetime, seconds")
    parser.add_argument("--alg", default="RS256", choices=["RS256", "ES256"])
    parser.add_argument("--client", action="append", default=[], help="ID:SECRET:SCOPES (scopes space-separated)")
    args = parser.parse_args()

    clients = {}
    for entry in args.client or ["agent:agent-secret:ldp:call"]:
        client_id, secret, scopes = entry.split(":", 2)
        clients[client_id] = Client(client_id, secret, scopes)

    lock = threading.Lock()
    # Retired keys leave the JWK Set but can still sign (for /admin/mint): what a leaked or withdrawn key makes.
    state = {"keys": [], "retired": [], "current": None, "issuer": None}

    def new_key(alg):
        kid = f"{alg.lower()}-{uuid.uuid4().hex[:8]}"
        params = {"kid": kid, "use": "sig", "alg": alg}
        if alg == "RS256":
            key = jwk.RSAKey.generate_key(2048, parameters=params, private=True)
        else:
            key = jwk.ECKey.generate_key("P-256", parameters=params, private=True)
        with lock:
            state["keys"].append((kid, alg, key))
            state["current"] = (kid, alg, key)
        return kid

    new_key(args.alg)

    def sign(claims, kid=None):
        with lock:
            found = [k for k in state["keys"] + state["retired"] if k[0] == kid] if kid else [state["current"]]
        kid, alg, key = found[0]
        return jwt.encode({"alg": alg, "kid": kid, "typ": "at+jwt"}, claims, key)

    def claims_for(client, scope, audience):
        now = int(time.time())
        return {
            "iss": state["issuer"],
            "sub": client.client_id,
            "client_id": client.client_id,
            "aud": audience or args.audience,
            "scope": scope,
            "iat": now,
            "nbf": now,
            "exp": now + args.ttl,
            "jti": uuid.uuid4().hex,
        }

    def access_token(client, grant_type, user=None, scope=None):
        audience = request.form.get("resource") or request.form.get("audience")
        return sign(claims_for(client, scope, audience))

    app = Flask(__name__)
    server = AuthorizationServer(
        app,
        query_client=lambda client_id: clients.get(client_id),
        save_token=lambda token, req: None,
    )
    server.register_grant(grants.ClientCredentialsGrant)
    server.register_token_generator("default", BearerTokenGenerator(access_token, expires_generator=args.ttl))

    @app.post("/oauth/token")
    def token():
        return server.create_token_response()

    @app.get("/oauth/authorize")
    def authorize():
        return server.create_authorization_response()

    def metadata():
        issuer = state["issuer"]
        scopes = sorted({s for c in clients.values() for s in c.scopes})
        return jsonify(
            issuer=issuer,
            # Required by OIDC discovery (and by the MCP SDK's RFC 8414 model); no grant here uses it, so it
            # answers every request with Authlib's unsupported_response_type error.
            authorization_endpoint=f"{issuer}/oauth/authorize",
            token_endpoint=f"{issuer}/oauth/token",
            jwks_uri=f"{issuer}/jwks",
            grant_types_supported=["client_credentials"],
            token_endpoint_auth_methods_supported=["client_secret_basic", "client_secret_post"],
            response_types_supported=["token"],
            scopes_supported=scopes,
            subject_types_supported=["public"],
            id_token_signing_alg_values_supported=["RS256", "ES256"],
        )

    app.get("/.well-known/openid-configuration")(metadata)
    app.add_url_rule("/.well-known/oauth-authorization-server", "as-metadata", metadata)

    @app.get("/jwks")
    def jwks():
        with lock:
            keys = [key.as_dict(private=False) for _, _, key in state["keys"]]
        return jsonify(keys=keys)

    @app.post("/admin/rotate")
    def rotate():
        alg = (request.get_json(silent=True) or {}).get("alg", args.alg)
        return jsonify(kid=new_key(alg))

    @app.post("/admin/retire")
    def retire():
        kid = (request.get_json(silent=True) or {})["kid"]
        with lock:
            state["retired"] += [k for k in state["keys"] if k[0] == kid]
            state["keys"] = [k for k in state["keys"] if k[0] != kid]
        return jsonify(retired=kid)

    @app.post("/admin/mint")
    def mint():
        body = request.get_json(silent=True) or {}
        client = clients[body.get("client", next(iter(clients)))]
        claims = claims_for(client, body.get("scope", " ".join(sorted(client.scopes))), body.get("aud"))
        now = int(time.time())
        for name in ("exp", "nbf"):
            if f"{name}_in" in body:
                claims[name] = now + int(body[f"{name}_in"])
        claims.update(body.get("claims", {}))
        forge = body.get("forge")
        if forge is None:
            return jsonify(token=sign(claims, body.get("kid")))
        with lock:
            kid, alg, key = state["current"]
        payload = b64(json.dumps(claims).encode())
        if forge == "none":
            header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid}).encode())
            return jsonify(token=f"{header}.{payload}.")
        if forge == "hs256-public-key":
            # The classic key confusion: HMAC keyed with the bytes of the issuer's public key (PEM), which anyone
            # can read, hoping the server uses whatever the header names with whatever key the kid finds.
            public_pem = key.as_pem(private=False)
            header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": kid}).encode())
            signature = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
            return jsonify(token=f"{header}.{payload}.{b64(signature)}")
        return jsonify(error=f"unknown forgery {forge}"), 400

    httpd = make_server(args.host, args.port, app, threaded=True)
    state["issuer"] = f"http://{args.host}:{httpd.server_port}"
    print(json.dumps({"url": state["issuer"]}), flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
