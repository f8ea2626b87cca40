"""The official MCP Python SDK as an OAuth client of `ldp serve --mcp` (ldp-cli/tests/serve_oauth.rs), following
the MCP authorization spec: its first request is refused 401, it reads the protected resource metadata the challenge
names, discovers the authorization server there, gets a token by client credentials (the SDK's
ClientCredentialsOAuthProvider) and calls a tool with it.

    python mcp_oauth_client.py MCP_URL ISSUER CLIENT_ID CLIENT_SECRET SCOPE TOOL JSON_ARGS

Prints one JSON object: the tool's result, as the SDK decoded it.
"""

import json
import sys

import anyio
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


class MemoryStorage:
    """The SDK's TokenStorage, kept in memory for the one run."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def main() -> None:
    url, issuer, client_id, secret, scope, tool, args = sys.argv[1:8]
    provider = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=MemoryStorage(),
        client_id=client_id,
        client_secret=secret,
        scope=scope,
        issuer=issuer,
    )
    async with create_mcp_http_client(auth=provider) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            result = await client.call_tool(tool, json.loads(args))
    print(json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True)))


anyio.run(main)
