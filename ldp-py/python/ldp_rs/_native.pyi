"""Type stubs of the native module ``ldp_rs._native`` (Rust, PyO3). Use the ``ldp_rs`` package around it."""

from collections.abc import Awaitable, Callable
from os import PathLike
from typing import Any

INVALID_INPUT: str

class SigningKey:
    """A message-signing key: ``hmac-sha256``, ``hmac-sha256-jcs`` (a shared secret) or ``ed25519-jcs`` (a 64-hex-digit seed)."""

    def __init__(self, algorithm: str, secret: str) -> None: ...
    @property
    def algorithm(self) -> str:
        """The algorithm's wire name."""
    @property
    def public_hex(self) -> str | None:
        """The Ed25519 public key in hex (``None`` for the HMAC schemes)."""

class TaskContext:
    """What a running skill sees besides its input."""

    def partial(self, chunk: Any) -> None:
        """Sends the next chunk of the output (a ``str`` as text, anything else as JSON) as a TASK_UPDATE."""
    def progress(self, fraction: float | None = None, message: str | None = None) -> None:
        """Reports progress as a TASK_UPDATE."""
    @property
    def history(self) -> list[dict[str, Any]]:
        """The session's earlier turns, oldest first: ``task_id``, ``skill``, ``input``, ``output``."""
    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled (a sync skill should stop)."""

class Reply:
    """How a task answers (used by the dispatcher)."""

    def ok(
        self, output_json: str, tokens: int | None = None, cost_usd: float | None = None, confidence: float | None = None
    ) -> bool: ...
    def fail(
        self,
        message: str,
        code: str,
        category: str = "runtime",
        retryable: bool = False,
        partial_output_json: str | None = None,
    ) -> bool: ...
    def on_cancel(self, callable: Callable[[], object]) -> None: ...

class NativeServer:
    """A running delegate server."""

    @property
    def url(self) -> str: ...
    @property
    def card_json(self) -> str: ...
    @property
    def banner(self) -> list[str]: ...
    @property
    def running(self) -> bool: ...
    def shutdown(self) -> None:
        """Shuts down gracefully, blocking with the GIL released."""

def start(
    delegate_id: str,
    bind: str,
    skills: list[tuple[str, str | None, float | None, str | None, str | None]],
    dispatcher: Callable[[str, str, TaskContext, Reply], None],
    *,
    name: str | None = None,
    model: tuple[str, str] | None = None,
    config_file: str | PathLike[str] | None = None,
    config_json: str | None = None,
    trust_domain: str | None = None,
    tokens: list[tuple[str, str]] = ...,
    signing_key: SigningKey | None = None,
    tls: tuple[str | PathLike[str], str | PathLike[str]] | None = None,
    store: str | None = None,
    rate_limit: str | None = None,
    otlp: str | None = None,
    shutdown_grace: float | None = None,
    cancel_grace: float | None = None,
) -> NativeServer:
    """Starts a delegate server (blocking while it binds, the GIL released)."""

class Connection:
    """A connection to one delegate."""

    @property
    def card_json(self) -> str: ...
    def call(self, skill: str, input_json: str) -> Awaitable[tuple[str, str]]: ...
    def stream(self, skill: str, input_json: str) -> Awaitable[Stream]: ...
    def close(self) -> Awaitable[None]: ...

class Stream:
    """A streamed task."""

    def next_event(self) -> Awaitable[tuple[str, Any, Any] | None]: ...
    def cancel(self) -> Awaitable[None]: ...

def connect(
    url: str,
    *,
    delegate_id: str | None = None,
    trust_domain: str | None = None,
    signing_key: SigningKey | None = None,
    bearer_token: str | None = None,
    token_command: str | None = None,
    client_credentials: tuple[str, str, str, list[str]] | None = None,
    connect_timeout: float | None = None,
    request_timeout: float | None = None,
    retries: int | None = None,
    max_message: int | None = None,
    tls_root_certificate_pem: bytes | None = None,
    tls_client_identity_pem: tuple[bytes, bytes] | None = None,
) -> Awaitable[Connection]: ...
def run_conformance(
    url: str,
    *,
    transports: list[str] = ...,
    token: str | None = None,
    untrusted_token: str | None = None,
    signing_key: SigningKey | None = None,
    ttl_hint: int | None = None,
    level: str = "all",
    request_timeout: float = 10.0,
    check_timeout: float = 60.0,
    deadline: float | None = None,
    oversize_bytes: int | None = None,
    tls_root_certificate_pem: bytes | None = None,
    baseline: str | PathLike[str] | None = None,
) -> tuple[str, bool]:
    """Runs the conformance kit, blocking with the GIL released: ``(report_json, passed)``."""
def render_report(report_json: str, format: str) -> str: ...
def compare_baseline(report_json: str, baseline: str | PathLike[str]) -> str: ...
