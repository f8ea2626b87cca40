"""Interop with the Python reference SDK (PyPI `ldp-protocol` 0.2.0): its client against our Python-defined delegate,
and our Python client against its delegate, unsigned and signed (`hmac-sha256`, the scheme it knows)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ldp_rs
from conftest import echo_delegate, ref_client, run

INPUT = {"text": "hello from the reference SDK", "n": [1, 2, 3]}



@pytest.fixture
def served() -> Iterator[Callable[..., ldp_rs.Server]]:
    servers: list[ldp_rs.Server] = []

    def start(**settings: Any) -> ldp_rs.Server:
        server = echo_delegate(**settings).start_in_thread()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def test_the_reference_client_calls_our_python_delegate(ref_python: str, served: Callable[..., ldp_rs.Server]) -> None:
    server = served()
    result = ref_client(
        ref_python, server.url, "--input", json.dumps(INPUT), "--expect-output", json.dumps({"echo": INPUT})
    )
    assert result["ok"], result
    assert result["steps"]["establish_session"]["hello_reply_type"] == "CAPABILITY_MANIFEST"
    assert result["steps"]["submit_task"]["provenance"]["produced_by"] == server.card["delegate_id"]
    assert result["steps"]["close_session"]["reply_type"] == "SESSION_CLOSE"


def test_the_reference_client_signs_and_our_python_delegate_signs_back(
    ref_python: str, served: Callable[..., ldp_rs.Server]
) -> None:
    secret = secrets.token_hex(16)
    server = served(signing_key=ldp_rs.SigningKey("hmac-sha256", secret))
    result = ref_client(
        ref_python,
        server.url,
        "--secret",
        secret,
        "--require-signed-responses",
        "--input",
        json.dumps(INPUT),
        "--expect-output",
        json.dumps({"echo": INPUT}),
    )
    assert result["ok"], result
    assert all(s["valid"] for s in result["response_signatures"]), result["response_signatures"]
    # Without the secret the reference client is refused (it would be accepted by the reference server).
    unsigned = ref_client(ref_python, server.url, "--input", json.dumps(INPUT))
    assert not unsigned["ok"]


def test_our_python_client_calls_the_reference_delegate(ref_delegate: Callable[..., str]) -> None:
    url = ref_delegate()

    async def main() -> None:
        async with await ldp_rs.connect(url, trust_domain="default") as conn:
            assert conn.card["delegate_id"] == "ldp:delegate:python-ref-echo"
            answer = await conn.call("echo", INPUT)
            assert answer.output == {"echo": INPUT}
            assert answer.provenance["produced_by"] == "ldp:delegate:python-ref-echo"

    run(main())


def test_our_python_client_calls_the_signing_reference_delegate(ref_delegate: Callable[..., str]) -> None:
    secret = secrets.token_hex(16)
    url = ref_delegate("--secret", secret)

    async def main() -> None:
        key = ldp_rs.SigningKey("hmac-sha256", secret)
        async with await ldp_rs.connect(url, signing_key=key, trust_domain="default") as conn:
            assert (await conn.call("echo", INPUT)).output == {"echo": INPUT}

    run(main())


def test_the_swap_example_serves_the_reference_client_and_stops_on_sigterm(ref_python: str) -> None:
    """examples/swap_reference_server.py under `Delegate.run`: the reference client, unchanged, is served; SIGTERM
    shuts it down gracefully (exit status 0)."""
    import pathlib
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from conftest import free_port

    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "swap_reference_server.py"
    bind = f"127.0.0.1:{free_port()}"
    child = subprocess.Popen([sys.executable, str(example), bind], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{bind}/ldp/identity", timeout=1) as resp:
                    assert json.load(resp)["delegate_id"] == "ldp:delegate:echo"
                break
            except OSError:
                assert time.monotonic() < deadline, "the example did not start"
                time.sleep(0.1)
        result = ref_client(
            ref_python, f"http://{bind}", "--input", json.dumps(INPUT), "--expect-output", json.dumps({"echo": INPUT})
        )
        assert result["ok"], result
    finally:
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == 0, stderr
