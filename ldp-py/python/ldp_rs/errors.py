"""The exceptions of ``ldp_rs``: one hierarchy, split by who caused the error.

::

    LdpException
    ├── TaskFailed         the delegate's typed LDP error (TASK_FAILED, SESSION_REJECT, ...); skills raise it too
    ├── TransportError     connecting, TLS, timeouts, HTTP or WebSocket failures
    ├── ProtocolError      a peer that broke the protocol (an answer that is not one)
    ├── UsageError         the caller's mistake: a bad id, URL, option, configuration or input (also a ValueError)
    ├── ServerError        a server that cannot start: the address is taken, the store cannot be opened
    └── ConformanceError   the conformance kit could not run (an unreachable endpoint)
    ConformanceFailure     a conformance run that failed (an AssertionError, for pytest)
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "LdpException",
    "TaskFailed",
    "TransportError",
    "ProtocolError",
    "UsageError",
    "ServerError",
    "ConformanceError",
    "ConformanceFailure",
    "CATEGORIES",
]

#: The error categories of the wire (paper section 3.3, plus ``security``).
CATEGORIES = ("identity", "capability", "policy", "runtime", "quality", "session", "transport", "security")


class LdpException(Exception):
    """The base of every error ``ldp_rs`` raises."""


class TaskFailed(LdpException):
    """A typed LDP failure.

    A client receives it when the delegate answers TASK_FAILED (or refuses the session); a skill raises it to fail
    its task with a chosen code and category instead of the default ``EXECUTION_FAILED`` / ``runtime``.

    Attributes:
        message: the human-readable explanation.
        code: the machine-readable code, e.g. ``EXECUTION_FAILED``, ``CANCELLED``, ``INVALID_INPUT``.
        category: one of :data:`CATEGORIES`.
        retryable: whether the same request may succeed if retried.
        partial_output: output produced before the failure, if any (any JSON value).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "EXECUTION_FAILED",
        category: str = "runtime",
        retryable: bool = False,
        partial_output: Any = None,
        partial_output_json: str | None = None,
    ) -> None:
        super().__init__(message)
        if category not in CATEGORIES:
            raise ValueError(f"category {category!r}: expected one of {', '.join(CATEGORIES)}")
        self.message = message
        self.code = code
        self.category = category
        self.retryable = retryable
        self.partial_output = json.loads(partial_output_json) if partial_output_json is not None else partial_output

    def __str__(self) -> str:
        return f"{self.code} ({self.category}{', retryable' if self.retryable else ''}): {self.message}"

    def __repr__(self) -> str:
        return f"TaskFailed({self.message!r}, code={self.code!r}, category={self.category!r}, retryable={self.retryable!r})"


class TransportError(LdpException):
    """The delegate could not be reached or answered at the transport level (connection, TLS, timeout, HTTP)."""


class ProtocolError(LdpException):
    """The peer sent something that is not a valid answer."""


class UsageError(LdpException, ValueError):
    """The caller's mistake: a bad delegate id, URL, option, configuration key, skill declaration or input."""


class ServerError(LdpException):
    """A server could not start: the address is taken, the store cannot be opened, a file cannot be read."""


class ConformanceError(LdpException):
    """The conformance kit could not make its run (an unreachable endpoint, a bad configuration)."""


class ConformanceFailure(AssertionError):
    """A conformance run that failed (raised by :func:`ldp_rs.conformance.assert_conforms`); carries the report."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report
