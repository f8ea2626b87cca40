"""Serving: a delegate whose skills are decorated Python functions, served by the Rust server (``ldp-sdk``)."""

from __future__ import annotations

import asyncio
import atexit
import json
import signal
import sys
import threading
import weakref
from collections.abc import Mapping
from os import PathLike
from typing import Any, Callable, TypeVar

from . import _native
from ._skill import Skill
from .errors import UsageError

__all__ = ["Delegate", "Server"]

F = TypeVar("F", bound=Callable[..., Any])

# Servers still running at interpreter exit are shut down first (their threads call into Python).
_running: weakref.WeakSet[Server] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        try:
            server._shutdown_now()
        except Exception:  # exiting anyway
            pass


class Delegate:
    """A delegate being declared: its identity, its skills and the server around them.

    Every keyword is a setting of the Rust front door's server (``ldp::config::ServerConfig``, documented key by key
    in docs/config.md): ``config`` takes any of its keys as a nested mapping (``{"sessions": {"max_sessions": 100},
    "connections": {"max_connections": 64}}``: every limit), ``config_file`` a TOML file of them; the other keywords
    are set over it.

    Args:
        delegate_id: ``ldp:delegate:<name>``.
        name: the display name on the card (default: the id's name part).
        model: ``(family, version)`` on the card and in every result's provenance.
        trust_domain: the trust domain on the card.
        tokens: bearer tokens and the trust domain each authenticates (``{token: domain}``); with any, every
            protected route wants one.
        signing_key: signs every answer and requires every message signed (with replay protection).
        tls: ``(cert_pem_path, key_pem_path)``: serve HTTPS and ``wss://``.
        store: ``memory`` (default), ``sqlite:PATH`` or a Redis URL: where sessions, the replay window and results
            are kept.
        rate_limit: requests allowed per peer, ``50/s`` or ``600/m``.
        otlp: an OTLP/HTTP collector to export every message's spans to.
        shutdown_grace: seconds running tasks get to finish on shutdown (default 30).
        cancel_grace: seconds a cancelled task's function may run on after its cancellation.
        config: keys of the server configuration, nested as in its TOML file.
        config_file: a TOML server configuration file (``ldp serve --config``'s format).
    """

    def __init__(
        self,
        delegate_id: str,
        *,
        name: str | None = None,
        model: tuple[str, str] | None = None,
        trust_domain: str | None = None,
        tokens: Mapping[str, str] | None = None,
        signing_key: _native.SigningKey | None = None,
        tls: tuple[str | PathLike[str], str | PathLike[str]] | None = None,
        store: str | None = None,
        rate_limit: str | None = None,
        otlp: str | None = None,
        shutdown_grace: float | None = None,
        cancel_grace: float | None = None,
        config: Mapping[str, Any] | None = None,
        config_file: str | PathLike[str] | None = None,
    ) -> None:
        self.delegate_id = delegate_id
        self._skills: dict[str, Skill] = {}
        try:
            config_json = json.dumps(config) if config is not None else None
        except TypeError as exc:
            raise UsageError(f"config: {exc}") from exc
        self._settings: dict[str, Any] = {
            "name": name,
            "model": model,
            "trust_domain": trust_domain,
            "tokens": list((tokens or {}).items()),
            "signing_key": signing_key,
            "tls": tls,
            "store": store,
            "rate_limit": rate_limit,
            "otlp": otlp,
            "shutdown_grace": shutdown_grace,
            "cancel_grace": cancel_grace,
            "config_json": config_json,
            "config_file": config_file,
        }

    def skill(
        self, name: str | None = None, *, description: str | None = None, quality: float | None = None
    ) -> Callable[[F], F]:
        """Declares the decorated function as a skill (named after it unless ``name`` is given).

        The function takes ``(input)`` or ``(input, context)`` (a :class:`TaskContext`), sync or ``async``; the
        input's and the return value's annotations (any type pydantic reads: ``str``, ``dict[str, int]``, a
        ``BaseModel``, a dataclass, a ``TypedDict``) become the card's input and output JSON Schemas, inputs are
        validated against them (``INVALID_INPUT`` when they do not fit) and outputs serialised with them. The first
        paragraph of the docstring describes the skill unless ``description`` is given. A raised exception fails
        the task (``TaskFailed`` with its code, anything else ``EXECUTION_FAILED``); the server goes on.
        """

        def register(fn: F) -> F:
            skill = Skill.of(fn, name, description, quality)
            if skill.name in self._skills:
                raise UsageError(f"skill {skill.name!r} is declared twice")
            self._skills[skill.name] = skill
            return fn

        return register

    @property
    def skills(self) -> list[str]:
        """The names of the skills declared so far."""
        return list(self._skills)

    def _start(self, bind: str, loop: asyncio.AbstractEventLoop | None) -> _native.NativeServer:
        skills = dict(self._skills)

        def dispatch(name: str, input_json: str, ctx: _native.TaskContext, reply: _native.Reply) -> None:
            skills[name].run(loop, input_json, ctx, reply)

        settings = dict(self._settings)
        return _native.start(
            self.delegate_id, bind, [s.spec() for s in skills.values()], dispatch, **settings
        )

    async def start(self, bind: str = "127.0.0.1:0") -> Server:
        """Starts serving on ``bind`` (``HOST:PORT``; port 0 picks a free one) from a running asyncio loop, whose
        loop then runs the ``async`` skills; sync skills run on the server's own threads. Stop with
        ``await server.aclose()`` (or ``async with``)."""
        loop = asyncio.get_running_loop()
        native = await loop.run_in_executor(None, self._start, bind, loop)
        return Server(native, loop, None)

    def start_in_thread(self, bind: str = "127.0.0.1:0") -> Server:
        """Starts serving on ``bind`` with an event loop of its own on a background thread for the ``async``
        skills; returns at once. Stop with ``server.close()`` (or ``with``)."""
        loop_thread = _LoopThread()
        try:
            native = self._start(bind, loop_thread.loop)
        except BaseException:
            loop_thread.stop()
            raise
        return Server(native, loop_thread.loop, loop_thread)

    def run(self, bind: str = "127.0.0.1:8090") -> None:
        """Serves on ``bind`` until SIGINT (Ctrl-C) or SIGTERM, then shuts down gracefully. Prints what the server
        is (its banner) on stderr."""

        async def main() -> None:
            server = await self.start(bind)
            for line in server.banner:
                print(line, file=sys.stderr, flush=True)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            try:
                await stop.wait()
            finally:
                await server.aclose()

        asyncio.run(main())


class _LoopThread:
    """An asyncio loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()

        self.thread = threading.Thread(target=main, name="ldp_rs-skills", daemon=True)
        self.thread.start()
        ready.wait()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


class Server:
    """A running delegate server (from :meth:`Delegate.start` or :meth:`Delegate.start_in_thread`)."""

    def __init__(
        self, native: _native.NativeServer, loop: asyncio.AbstractEventLoop, loop_thread: _LoopThread | None
    ) -> None:
        self._native = native
        self._loop = loop
        self._loop_thread = loop_thread
        self.card: dict[str, Any] = json.loads(native.card_json)
        """The identity card served."""
        _running.add(self)

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (``https://`` with TLS); WebSocket clients use ``ws://`` on the same address."""
        return self._native.url

    @property
    def ws_url(self) -> str:
        """The same address as a WebSocket URL (``ws://`` or ``wss://``)."""
        return "ws" + self._native.url[len("http") :]

    @property
    def banner(self) -> list[str]:
        """What the server is, one line each (the delegate and its skills, authentication, store, URLs)."""
        return self._native.banner

    @property
    def running(self) -> bool:
        """Whether the server still serves."""
        return self._native.running

    def _shutdown_now(self) -> None:
        self._native.shutdown()
        _running.discard(self)
        if self._loop_thread is not None:
            self._loop_thread.stop()

    async def aclose(self) -> None:
        """Shuts down gracefully: new work refused, running tasks given the shutdown grace (the loop keeps running
        the ``async`` skills meanwhile)."""
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown_now)

    def close(self) -> None:
        """Shuts down gracefully, blocking. From the loop that runs this server's ``async`` skills, use
        :meth:`aclose` instead (blocking that loop would keep running skills from finishing)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self._loop:
            raise UsageError("close() would block the loop that runs the skills: use `await server.aclose()`")
        self._shutdown_now()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<ldp_rs.Server {self.card.get('delegate_id')} at {self.url}{'' if self.running else ' (stopped)'}>"
