"""A skill as declared by a decorated Python function: its schemas from the annotations, its input decoding and its
output encoding (pydantic does both), and how it runs and answers (the dispatcher the Rust server calls)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import pydantic
import pydantic_core

from . import _native
from .errors import TaskFailed, UsageError

__all__ = ["Output", "Skill"]

log = logging.getLogger("ldp_rs")


@dataclass
class Output:
    """A skill's output with what the skill reports about it, which goes into the result's provenance.

    Return it instead of the bare value to report usage: ``return Output(summary, tokens=812, confidence=0.9)``.
    """

    value: Any
    tokens: int | None = None
    cost_usd: float | None = None
    confidence: float | None = None


class _InvalidInput(Exception):
    pass


def _adapter(annotation: Any) -> pydantic.TypeAdapter[Any] | None:
    if annotation is inspect.Parameter.empty or annotation is Any or annotation is Output:
        return None
    return pydantic.TypeAdapter(annotation)


@dataclass
class Skill:
    """One skill: the function, and what the card says of it."""

    name: str
    fn: Callable[..., Any]
    description: str | None = None
    quality: float | None = None
    is_async: bool = False
    takes_context: bool = False
    input_adapter: pydantic.TypeAdapter[Any] | None = None
    output_adapter: pydantic.TypeAdapter[Any] | None = None
    input_schema: dict[str, Any] | None = field(default=None)
    output_schema: dict[str, Any] | None = field(default=None)

    @classmethod
    def of(cls, fn: Callable[..., Any], name: str | None, description: str | None, quality: float | None) -> Skill:
        """Reads a function's signature: ``(input)`` or ``(input, context)``, sync or ``async``."""
        if not callable(fn):
            raise UsageError(f"a skill must be a function, not {fn!r}")
        try:
            hints = typing.get_type_hints(fn)
        except Exception as exc:  # an annotation that does not resolve
            raise UsageError(f"skill {getattr(fn, '__name__', fn)!r}: cannot read its annotations: {exc}") from exc
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        if not 1 <= len(params) <= 2:
            raise UsageError(
                f"skill {getattr(fn, '__name__', fn)!r} must take (input) or (input, context), "
                f"not {len(params)} positional parameters"
            )
        skill_name = name or getattr(fn, "__name__", None)
        if not skill_name:
            raise UsageError("a skill needs a name")
        try:
            input_adapter = _adapter(hints.get(params[0].name, inspect.Parameter.empty))
            output_adapter = _adapter(hints.get("return", inspect.Parameter.empty))
            input_schema = input_adapter.json_schema() if input_adapter else None
            output_schema = output_adapter.json_schema() if output_adapter else None
        except pydantic.PydanticUserError as exc:
            raise UsageError(f"skill {skill_name!r}: {exc}") from exc
        if description is None and fn.__doc__:
            description = inspect.cleandoc(fn.__doc__).split("\n\n")[0]
        return cls(
            name=skill_name,
            fn=fn,
            description=description,
            quality=quality,
            is_async=inspect.iscoroutinefunction(fn),
            takes_context=len(params) == 2,
            input_adapter=input_adapter,
            output_adapter=output_adapter,
            input_schema=input_schema,
            output_schema=output_schema,
        )

    def spec(self) -> tuple[str, str | None, float | None, str | None, str | None]:
        """What the native server puts on the card."""
        return (
            self.name,
            self.description,
            self.quality,
            json.dumps(self.input_schema) if self.input_schema is not None else None,
            json.dumps(self.output_schema) if self.output_schema is not None else None,
        )

    def decode(self, input_json: str) -> Any:
        """The task's input as the function's type. Text mode carries a string: when it does not fit the type as it
        is, it is read as JSON (as the Rust front door does)."""
        if self.input_adapter is None:
            return json.loads(input_json)
        try:
            return self.input_adapter.validate_json(input_json)
        except pydantic.ValidationError as first:
            value = json.loads(input_json)
            if isinstance(value, str):
                try:
                    return self.input_adapter.validate_json(value)
                except (pydantic.ValidationError, ValueError):
                    pass
            raise _InvalidInput(f"the input does not fit skill {self.name!r}: {first}") from None

    def encode(self, out: Any) -> tuple[str, int | None, float | None, float | None]:
        """The output as JSON text, with its usage figures."""
        usage: tuple[int | None, float | None, float | None] = (None, None, None)
        if isinstance(out, Output):
            usage = (out.tokens, out.cost_usd, out.confidence)
            out = out.value
        if self.output_adapter is not None:
            text = self.output_adapter.dump_json(out).decode()
        else:
            text = pydantic_core.to_json(out).decode()
        return (text, *usage)

    # Running a task: called by the dispatcher (on a blocking thread of the Rust server, with the GIL).

    def answer(self, reply: _native.Reply, out: Any) -> None:
        try:
            text, tokens, cost, confidence = self.encode(out)
        except Exception as exc:  # an output pydantic cannot serialise
            log.error("skill %r: output not serialisable: %s", self.name, exc)
            reply.fail(f"the output of skill {self.name!r} is not serialisable: {exc}", "EXECUTION_FAILED")
            return
        reply.ok(text, tokens, cost, confidence)

    def failed(self, reply: _native.Reply, exc: BaseException) -> None:
        if isinstance(exc, TaskFailed):
            partial = None if exc.partial_output is None else pydantic_core.to_json(exc.partial_output).decode()
            reply.fail(exc.message, exc.code, exc.category, exc.retryable, partial)
            return
        log.error("skill %r raised", self.name, exc_info=exc)
        reply.fail(f"{type(exc).__name__}: {exc}", "EXECUTION_FAILED", "runtime", False)

    def run(self, loop: asyncio.AbstractEventLoop | None, input_json: str, ctx: Any, reply: _native.Reply) -> None:
        try:
            arg = self.decode(input_json)
        except _InvalidInput as exc:
            reply.fail(str(exc), _native.INVALID_INPUT, "capability", False)
            return
        except ValueError as exc:  # not JSON: the server sends JSON, so this is a bug, not the peer's
            reply.fail(f"input not JSON: {exc}", "EXECUTION_FAILED")
            return
        args = (arg, ctx) if self.takes_context else (arg,)
        if self.is_async:
            if loop is None or loop.is_closed():
                reply.fail("the server's event loop is not running", "EXECUTION_FAILED", "runtime", True)
                return
            future = asyncio.run_coroutine_threadsafe(self._run_async(args, reply), loop)
            reply.on_cancel(future.cancel)
            return
        try:
            out = self.fn(*args)
        except Exception as exc:
            self.failed(reply, exc)
            return
        self.answer(reply, out)

    async def _run_async(self, args: tuple[Any, ...], reply: _native.Reply) -> None:
        try:
            out = await self.fn(*args)
        except asyncio.CancelledError:
            reply.fail("cancelled", "CANCELLED", "runtime", False)
            raise
        except Exception as exc:
            self.failed(reply, exc)
            return
        self.answer(reply, out)
