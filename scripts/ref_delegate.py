#!/usr/bin/env python3
"""Run the Python reference SDK's delegate server (PyPI ldp-protocol 0.2.0) as an echo delegate.

Usage:
    scripts/ref_delegate.py --port PORT [--host 127.0.0.1] [--delegate-id ID]
                            [--trust-domain NAME] [--secret SECRET]

The delegate is an `ldp_protocol.LdpDelegate` subclass served by the SDK's own `LdpDelegate.run()`
(Starlette + uvicorn). Like the SDK's own echo delegate (its test suite's EchoDelegate), every task
returns output `{"echo": <input>}` with confidence 0.99, whatever the skill (the SDK does not check
skills); the identity card declares one capability, `echo`.

stdout: exactly one line, `READY http://HOST:PORT`, once GET /ldp/identity on that address answers
with this delegate's identity card. Everything else (the SDK's own banner, uvicorn's logs) goes to
stderr. SIGTERM or SIGINT: uvicorn shuts down gracefully and the process exits 0.

Exit codes: 0 after a clean shutdown; 1 if the port is taken or the server does not become ready
within --ready-timeout seconds (default 30); 2 if the SDK cannot be installed; 3 if uvicorn fails
to start.

--secret enables the SDK's hmac-sha256 signing: responses are signed, and incoming messages that
carry a signature are verified (unsigned ones are still accepted; that is the SDK's behaviour).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ldp_ref_bootstrap  # noqa: E402

ldp_ref_bootstrap.ensure_sdk(__file__)

from ldp_protocol import (  # noqa: E402
    LdpCapability,
    LdpDelegate,
    QualityMetrics,
    TrustDomain,
)

REAL_STDOUT = sys.stdout


def log(msg: str) -> None:
    sys.stderr.write(f"ref_delegate: {msg}\n")
    sys.stderr.flush()


class EchoDelegate(LdpDelegate):
    async def handle_task(self, skill, input_data, task_id):
        return {"echo": input_data}, 0.99


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Python reference (ldp-protocol 0.2.0) echo delegate")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True, help="TCP port (the caller picks a free one)")
    p.add_argument("--delegate-id", default="ldp:delegate:python-ref-echo")
    p.add_argument("--trust-domain", default="default", help="trust domain name (default: default)")
    p.add_argument("--secret", default=None, help="hmac-sha256 signing secret (SDK signing on)")
    p.add_argument("--ready-timeout", type=float, default=30.0, help="seconds to wait for readiness")
    a = p.parse_args()
    if not 1 <= a.port <= 65535:
        p.error("--port must be in 1..65535")
    return a


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def wait_ready(base: str, delegate_id: str, timeout: float) -> None:
    """Poll GET /ldp/identity until it serves our card, then print READY (daemon thread)."""
    deadline = time.monotonic() + timeout
    url = f"{base}/ldp/identity"
    last_err = "no attempt"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                card = json.loads(resp.read().decode("utf-8"))
            if card.get("delegate_id") == delegate_id:
                REAL_STDOUT.write(f"READY {base}\n")
                REAL_STDOUT.flush()
                return
            last_err = f"{url} served a different delegate: {card.get('delegate_id')!r}"
        except (OSError, urllib.error.URLError, ValueError) as exc:
            last_err = str(exc)
        time.sleep(0.05)
    log(f"ERROR: not ready after {timeout}s ({last_err}); exiting")
    os._exit(1)


def main() -> int:
    args = parse_args()
    if not port_is_free(args.host, args.port):
        log(f"ERROR: {args.host}:{args.port} is already in use")
        return 1

    delegate = EchoDelegate(
        delegate_id=args.delegate_id,
        name="Python reference echo delegate",
        description="ldp-protocol 0.2.0 (PyPI) LdpDelegate echoing its input",
        model_family="echo",
        model_version="1.0",
        capabilities=[
            LdpCapability(
                name="echo",
                description="Echoes the input back as {\"echo\": input}",
                quality=QualityMetrics(quality_score=0.99),
            )
        ],
        trust_domain=TrustDomain(name=args.trust_domain),
        signing_secret=args.secret,
    )

    host_for_url = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host_for_url}:{args.port}"

    # uvicorn re-raises SIGTERM/SIGINT after its graceful shutdown, once it has restored the
    # previous handlers: install handlers that just record the signal so that run() returns.
    stopped = []
    signal.signal(signal.SIGTERM, lambda sig, frame: stopped.append(sig))
    signal.signal(signal.SIGINT, lambda sig, frame: stopped.append(sig))

    threading.Thread(
        target=wait_ready, args=(base, args.delegate_id, args.ready_timeout), daemon=True
    ).start()

    # LdpDelegate.run() prints a banner with print() and uvicorn's access log goes to sys.stdout:
    # keep stdout for the READY line only.
    sys.stdout = sys.stderr
    try:
        delegate.run(host=args.host, port=args.port)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        if code != 0:
            log(f"ERROR: uvicorn exited with status {code}")
            return 3
    log(f"stopped (signal {stopped[0] if stopped else 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
