"""The LLM Delegate Protocol (LDP) for Python, on the ldp-rs Rust core.

A delegate whose skills are Python functions, served by the Rust server (sessions, signing, replay protection,
limits, HTTP + SSE + WebSocket on one port)::

    import ldp_rs

    delegate = ldp_rs.Delegate("ldp:delegate:upper")

    @delegate.skill()
    def upper(text: str, ctx: ldp_rs.TaskContext) -> str:
        return f"{text.upper()} (turn {len(ctx.history) + 1})"

    delegate.run("127.0.0.1:8090")   # or: server = await delegate.start(...), delegate.start_in_thread(...)

A client::

    async with await ldp_rs.connect("http://127.0.0.1:8090") as upper:
        answer = await upper.call("upper", "hi")
        print(answer.output, answer.provenance["produced_by"])

The conformance kit: :mod:`ldp_rs.conformance`. Errors: :mod:`ldp_rs.errors`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import conformance, errors
from ._client import Answer, ClientOptions, Connection, Done, Partial, Progress, TaskStream, connect
from ._delegate import Delegate, Server
from ._native import INVALID_INPUT, SigningKey, TaskContext
from ._skill import Output
from .errors import (
    ConformanceError,
    ConformanceFailure,
    LdpException,
    ProtocolError,
    ServerError,
    TaskFailed,
    TransportError,
    UsageError,
)

try:
    __version__ = version("ldp-rs")
except PackageNotFoundError:  # not installed (a source checkout)
    __version__ = "0.0.0"

__all__ = [
    "Answer",
    "ClientOptions",
    "ConformanceError",
    "ConformanceFailure",
    "Connection",
    "Delegate",
    "Done",
    "INVALID_INPUT",
    "LdpException",
    "Output",
    "Partial",
    "Progress",
    "ProtocolError",
    "Server",
    "ServerError",
    "SigningKey",
    "TaskContext",
    "TaskFailed",
    "TaskStream",
    "TransportError",
    "UsageError",
    "conformance",
    "connect",
    "errors",
]
