"""The conformance kit from Python: against our Python-defined delegate (it passes, unsigned and signed, over HTTP
and WebSocket) and against the reference SDK's delegate (it fails, exactly as the committed baseline says)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest

import ldp_rs
from conftest import BASELINES, echo_delegate, run
from ldp_rs import conformance



def test_our_python_delegate_passes_the_kit() -> None:
    with echo_delegate().start_in_thread() as server:
        report = conformance.assert_conforms(server.url, transports=["http", "ws"], ttl_hint=1)
    assert report.passed
    assert report.summary["failures"] == 0
    assert report.requirement("LDP-SESS-001")["status"] == "pass"  # type: ignore[index]
    assert "LDP-SESS-001" in report.render("table")
    assert json.loads(report.render("json"))["target"] == report.data["target"]


def test_our_signing_python_delegate_passes_the_signed_kit() -> None:
    key = ldp_rs.SigningKey("hmac-sha256-jcs", secrets.token_hex(32))
    with echo_delegate(signing_key=key).start_in_thread() as server:
        report = conformance.assert_conforms(server.url, signing_key=key, ttl_hint=1)
    assert report.data["signing"] == "hmac-sha256-jcs"


def test_the_kit_runs_from_a_running_loop_against_a_delegate_in_that_loop() -> None:
    async def main() -> conformance.Report:
        async with await echo_delegate().start() as server:
            return await conformance.run_async(server.url, level="must", ttl_hint=1)

    assert run(main(), timeout=300).passed


def test_the_reference_delegate_fails_the_kit_exactly_as_its_baseline_says(ref_delegate: Callable[..., str]) -> None:
    url = ref_delegate()
    baseline = BASELINES / "python-ldp-protocol-0.2.0.json"
    report = conformance.run(url, ttl_hint=1, oversize_bytes=2 * 1024 * 1024, baseline=baseline)
    assert report.baseline is not None and report.baseline["ok"], report.baseline
    listed = {entry["id"] for entry in json.loads(baseline.read_text())["expected_failures"]}
    assert set(report.failing_ids) == listed
    assert report.compare(baseline)["ok"]
    with pytest.raises(ldp_rs.ConformanceFailure) as failure:
        conformance.assert_conforms(url, ttl_hint=1, oversize_bytes=2 * 1024 * 1024)
    assert failure.value.report.failing_ids == report.failing_ids


def test_an_unreachable_endpoint_is_a_conformance_error() -> None:
    from conftest import free_port

    with pytest.raises(ldp_rs.ConformanceError):
        conformance.run(f"http://127.0.0.1:{free_port()}", request_timeout=2, deadline=20)
