"""Fixtures of the ldp-rs test suite: the reference SDK (`ldp-protocol` 0.2.0, installed by scripts/ref-sdk.sh into
its own venv) as a delegate and as a client, in subprocesses; loopback ports; an asyncio runner with a timeout.

No test may skip: a skip is turned into a failure here (a missing reference SDK fails, it never hides a test)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any, Callable, Coroutine, TypeVar

import pytest

import ldp_rs

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
BASELINES = ROOT / "conformance" / "baselines"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Runs `coro` in a new event loop, failing after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped:
        report.outcome = "failed"
        report.longrepr = f"this suite forbids skipping: {report.longrepr}"


@pytest.fixture(scope="session")
def ref_python() -> str:
    """The python of the reference SDK's venv (installed on first use)."""
    out = subprocess.run(["bash", str(SCRIPTS / "ref-sdk.sh")], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        pytest.fail(f"scripts/ref-sdk.sh could not install ldp-protocol 0.2.0:\n{out.stderr}")
    return out.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ref_delegate(ref_python: str) -> Iterator[Callable[..., str]]:
    """Starts the reference SDK's echo delegate (scripts/ref_delegate.py) with extra arguments; returns its URL."""
    children: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        port = free_port()
        child = subprocess.Popen(
            [ref_python, str(SCRIPTS / "ref_delegate.py"), "--host", "127.0.0.1", "--port", str(port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        children.append(child)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(child.stdout.readline() if child.stdout else ""))
        reader.start()
        reader.join(timeout=90)
        if not line or not line[0].startswith("READY "):
            pytest.fail(f"ref_delegate.py did not become ready: {line}")
        return line[0][len("READY ") :].strip()

    yield start
    for child in children:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def ref_client(ref_python: str, url: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Runs the reference SDK's client (scripts/ref_client.py) against `url`: its one JSON line of results."""
    out = subprocess.run(
        [ref_python, str(SCRIPTS / "ref_client.py"), url, *args], capture_output=True, text=True, timeout=timeout
    )
    lines = out.stdout.strip().splitlines()
    assert lines, f"ref_client.py printed nothing (status {out.returncode}):\n{out.stderr}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["_stderr"] = out.stderr
    return result


def echo_delegate(**settings: Any) -> ldp_rs.Delegate:
    """The reference SDK's echo delegate written with our package: `{"echo": input}` for any input."""
    delegate = ldp_rs.Delegate("ldp:delegate:python-echo", **settings)

    @delegate.skill()
    def echo(value: Any) -> dict[str, Any]:
        """Echoes its input as {"echo": input}, as the reference SDK's echo delegate does."""
        return {"echo": value}

    return delegate
