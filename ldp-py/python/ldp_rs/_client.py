"""Calling: ``await connect(url)``, then ``await conn.call(skill, input)`` or ``async for event in await
conn.stream(skill, input)``. The Rust front door's client (``ldp::connect_with``) does the work."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Generic, TypeVar, overload

import pydantic
import pydantic_core

from . import _native
from .errors import ProtocolError, UsageError

__all__ = ["ClientOptions", "Connection", "Answer", "Partial", "Progress", "Done", "TaskStream", "connect"]

T = TypeVar("T")


@dataclass
class ClientOptions:
    """How a client connects and who it is: the Rust front door's ``ClientOptions``.

    Attributes:
        delegate_id: the id the client sends as (default ``ldp:delegate:client``).
        trust_domain: the trust domain the client declares when it opens a session (default none; the reference
            SDK's delegate wants one it trusts, its own: ``default``).
        signing_key: signs every message and requires the delegate's answers signed (replay-protected).
        bearer_token: a fixed bearer token.
        token_command: a command whose output is the token, cached for 5 minutes.
        client_credentials: OAuth 2.0 client credentials ``(token_url, client_id, client_secret, scopes)``.
        connect_timeout: seconds to connect.
        request_timeout: seconds one request may take (the task included).
        retries: HTTP retries (WebSocket reconnects) after the first attempt.
        max_message: the largest answer accepted, in bytes.
        tls_root_certificate: a CA (PEM bytes, or a path to a PEM file) to trust beyond the web PKI roots.
        tls_client_identity: mutual TLS: ``(cert_chain_pem, key_pem)`` as bytes or paths.
    """

    delegate_id: str | None = None
    trust_domain: str | None = None
    signing_key: _native.SigningKey | None = None
    bearer_token: str | None = None
    token_command: str | None = None
    client_credentials: tuple[str, str, str, list[str]] | None = None
    connect_timeout: float | None = None
    request_timeout: float | None = None
    retries: int | None = None
    max_message: int | None = None
    tls_root_certificate: bytes | str | PathLike[str] | None = None
    tls_client_identity: tuple[bytes | str | PathLike[str], bytes | str | PathLike[str]] | None = None

    def _native_kwargs(self) -> dict[str, Any]:
        def pem(value: bytes | str | PathLike[str]) -> bytes:
            if isinstance(value, bytes):
                return value
            with open(value, "rb") as f:
                return f.read()

        return {
            "delegate_id": self.delegate_id,
            "trust_domain": self.trust_domain,
            "signing_key": self.signing_key,
            "bearer_token": self.bearer_token,
            "token_command": self.token_command,
            "client_credentials": self.client_credentials,
            "connect_timeout": self.connect_timeout,
            "request_timeout": self.request_timeout,
            "retries": self.retries,
            "max_message": self.max_message,
            "tls_root_certificate_pem": pem(self.tls_root_certificate) if self.tls_root_certificate else None,
            "tls_client_identity_pem": (
                (pem(self.tls_client_identity[0]), pem(self.tls_client_identity[1]))
                if self.tls_client_identity
                else None
            ),
        }


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A task's output with its provenance (who produced it, with what model, at what cost: RFC 6)."""

    output: T
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Partial:
    """The next chunk of a streamed task's output."""

    chunk: Any


@dataclass(frozen=True)
class Progress:
    """A streamed task's progress: ``fraction`` done in 0.0-1.0 and a status message (either may be ``None``)."""

    fraction: float | None
    message: str | None


@dataclass(frozen=True)
class Done:
    """A streamed task's answer: the last event."""

    answer: Answer[Any]


def _encode(value: Any) -> str:
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise UsageError(f"input not encodable as JSON: {exc}") from exc


def _decode(output_json: str, output_type: Any) -> Any:
    if output_type is None:
        return json.loads(output_json)
    try:
        return pydantic.TypeAdapter(output_type).validate_json(output_json)
    except pydantic.ValidationError as exc:
        raise ProtocolError(f"the output does not fit {output_type!r}: {exc}") from exc


class TaskStream:
    """A streamed task: an async iterator of :class:`Partial`, :class:`Progress` and finally :class:`Done`; a
    failed or cancelled task raises :class:`~ldp_rs.TaskFailed` from the iteration."""

    def __init__(self, native: _native.Stream) -> None:
        self._native = native
        self.answer: Answer[Any] | None = None
        """The answer, once :class:`Done` has been yielded."""

    def __aiter__(self) -> TaskStream:
        return self

    async def __anext__(self) -> Partial | Progress | Done:
        event = await self._native.next_event()
        if event is None:
            raise StopAsyncIteration
        kind, a, b = event
        if kind == "partial":
            return Partial(json.loads(a))
        if kind == "progress":
            return Progress(a, b)
        self.answer = Answer(json.loads(a), json.loads(b))
        return Done(self.answer)

    async def cancel(self) -> None:
        """Cancels the task (TASK_CANCEL); iterating then raises ``TaskFailed`` with code ``CANCELLED``."""
        await self._native.cancel()


class Connection:
    """A connection to one delegate; its session opens on the first call and is reused (the delegate sees the
    earlier turns). Use as ``async with await connect(url) as conn``, or call :meth:`close`."""

    def __init__(self, native: _native.Connection) -> None:
        self._native = native
        self.card: dict[str, Any] = json.loads(native.card_json)
        """The delegate's identity card."""

    @overload
    async def call(self, skill: str, input: Any) -> Answer[Any]: ...
    @overload
    async def call(self, skill: str, input: Any, *, output_type: type[T]) -> Answer[T]: ...

    async def call(self, skill: str, input: Any, *, output_type: Any = None) -> Answer[Any]:
        """Runs ``skill`` on ``input`` (any value pydantic serialises: a ``BaseModel``, a dict, a str) and returns
        its output (read into ``output_type`` when given, else plain JSON values) with its provenance."""
        output_json, provenance_json = await self._native.call(skill, _encode(input))
        return Answer(_decode(output_json, output_type), json.loads(provenance_json))

    async def stream(self, skill: str, input: Any) -> TaskStream:
        """Runs ``skill`` on ``input``, yielding its partial output and progress as they come, then its answer."""
        return TaskStream(await self._native.stream(skill, _encode(input)))

    async def close(self) -> None:
        """Closes the session (the next call opens another)."""
        await self._native.close()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def connect(url: str, options: ClientOptions | None = None, **settings: Any) -> Connection:
    """Discovers the delegate at ``url`` (``http(s)://`` or ``ws(s)://``; the scheme picks the transport) and greets
    it. ``options`` (or the same fields as keywords) set tokens, signing, TLS and timeouts."""
    if options is not None and settings:
        raise UsageError("give either options or keyword settings, not both")
    if options is None:
        try:
            options = ClientOptions(**settings)
        except TypeError as exc:
            raise UsageError(str(exc)) from exc
    return Connection(await _native.connect(url, **options._native_kwargs()))
