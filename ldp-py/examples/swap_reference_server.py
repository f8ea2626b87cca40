"""Swap the reference SDK's server for ours, the client unchanged.

The reference SDK (`pip install "ldp-protocol[server]==0.2.0"`) serves an echo delegate like this::

    class EchoDelegate(LdpDelegate):
        async def handle_task(self, skill, input_data, task_id):
            return {"echo": input_data}, 0.99
    EchoDelegate(delegate_id="ldp:delegate:echo", ...).run(port=8090)

The same delegate on the Rust server (sessions, replay protection, limits, streaming and WebSocket come with it):
run this file, then point the reference SDK's unchanged `LdpClient` at http://127.0.0.1:8090 (the repository's
scripts/ref_client.py does exactly that; tests/test_reference_sdk.py runs it against this delegate).

    python examples/swap_reference_server.py [HOST:PORT] [--secret S]
"""

from __future__ import annotations

import argparse
from typing import Any

import ldp_rs

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("bind", nargs="?", default="127.0.0.1:8090")
parser.add_argument("--secret", help="hmac-sha256 secret, as the reference SDK's signing_secret")
args = parser.parse_args()

delegate = ldp_rs.Delegate(
    "ldp:delegate:echo",
    signing_key=ldp_rs.SigningKey("hmac-sha256", args.secret) if args.secret else None,
)


@delegate.skill(quality=0.99)
async def echo(input_data: Any) -> dict[str, Any]:
    """Echoes the input back as {"echo": input}."""
    return {"echo": input_data}


delegate.run(args.bind)
