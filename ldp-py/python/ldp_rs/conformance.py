"""The conformance kit (``ldp-conformance``) from Python: run it against any LDP endpoint, ours or anyone's.

In a pytest suite::

    from ldp_rs import conformance

    def test_my_delegate_conforms(my_delegate_url):
        conformance.assert_conforms(my_delegate_url)                      # every MUST passes
        conformance.assert_conforms(my_delegate_url, baseline="kit.json") # or exactly these failures

A failed run raises :class:`~ldp_rs.errors.ConformanceFailure` (an ``AssertionError``) whose message is the kit's
table of results; :func:`run` returns the :class:`Report` without judging it.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

from . import _native
from .errors import ConformanceFailure

__all__ = ["Report", "run", "run_async", "assert_conforms"]


@dataclass(frozen=True)
class Report:
    """A conformance report: per requirement, the verdict and the evidence.

    Attributes:
        passed: whether every required requirement passed (with a baseline: whether the failures are exactly the
            listed ones).
        data: the whole report as the kit's JSON (``requirements``, ``summary``, ``profiles``, ``checks``, ...).
    """

    passed: bool
    data: dict[str, Any]

    @property
    def summary(self) -> dict[str, Any]:
        """Counts: passed, failures, warnings, skipped, blocked, not testable."""
        return self.data["summary"]

    @property
    def failing_ids(self) -> list[str]:
        """The requirements that failed or could not be tested (any level)."""
        return [r["id"] for r in self.data["requirements"] if r["status"] in ("fail", "not_testable")]

    @property
    def baseline(self) -> dict[str, Any] | None:
        """The comparison with the baseline (``unexpected``, ``stale``, ``changed``, ``ok``), when one was given."""
        return self.data.get("baseline")

    def requirement(self, requirement_id: str) -> dict[str, Any] | None:
        """The result of one requirement (``LDP-SESS-001``, say)."""
        return next((r for r in self.data["requirements"] if r["id"] == requirement_id), None)

    def render(self, format: str = "table") -> str:
        """The report as ``table``, ``json``, ``junit`` or ``markdown``."""
        return _native.render_report(json.dumps(self.data), format)

    def compare(self, baseline: str | PathLike[str]) -> dict[str, Any]:
        """Compares with an expected-failures file: ``unexpected``, ``stale``, ``changed`` and ``ok``."""
        return json.loads(_native.compare_baseline(json.dumps(self.data), baseline))


def run(
    url: str,
    *,
    transports: Sequence[str] = ("http",),
    token: str | None = None,
    untrusted_token: str | None = None,
    signing_key: _native.SigningKey | None = None,
    ttl_hint: int | None = None,
    level: str = "all",
    request_timeout: float = 10.0,
    check_timeout: float = 60.0,
    deadline: float | None = None,
    oversize_bytes: int | None = None,
    tls_root_certificate_pem: bytes | None = None,
    baseline: str | PathLike[str] | None = None,
) -> Report:
    """Runs the kit against ``url``, blocking (the GIL released; the whole run bounded by ``deadline`` seconds,
    300 by default) and returns its report.

    Args:
        transports: ``http`` and/or ``ws``; a requirement passes only if it passes on each.
        token: a bearer token for every request; ``untrusted_token`` one of an untrusted domain.
        signing_key: sign the kit's messages (the implementation requires signatures).
        ttl_hint: the short TTL, in seconds, the expiry check proposes.
        level: ``must``, ``should`` or ``all``.
        oversize_bytes: the size of the oversize message the kit sends (default 8 MiB).
        baseline: an expected-failures file (``ldp conformance --baseline``'s format): the run then passes when
            its failures are exactly the listed ones.

    Raises:
        ConformanceError: the run could not be made (the endpoint is unreachable).
    """
    report_json, passed = _native.run_conformance(
        url,
        transports=list(transports),
        token=token,
        untrusted_token=untrusted_token,
        signing_key=signing_key,
        ttl_hint=ttl_hint,
        level=level,
        request_timeout=request_timeout,
        check_timeout=check_timeout,
        deadline=deadline,
        oversize_bytes=oversize_bytes,
        tls_root_certificate_pem=tls_root_certificate_pem,
        baseline=baseline,
    )
    return Report(passed, json.loads(report_json))


async def run_async(url: str, **settings: Any) -> Report:
    """:func:`run` from a running asyncio loop, on a worker thread (the loop keeps serving, e.g. the delegate under
    test)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(run, url, **settings))


def assert_conforms(url: str, **settings: Any) -> Report:
    """:func:`run`, then raises :class:`ConformanceFailure` (an ``AssertionError``) with the kit's table unless the
    run passed; returns the report."""
    report = run(url, **settings)
    if not report.passed:
        message = f"{url} does not conform: failing {report.failing_ids}"
        if report.baseline is not None:
            message = f"{url} differs from its baseline: {report.baseline}"
        raise ConformanceFailure(f"{message}\n{report.render('table')}", report)
    return report
