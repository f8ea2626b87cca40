"""Streaming (partial output and progress over SSE and WebSocket) and cancellation, from Python on both sides."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import ldp_rs
from conftest import run
from ldp_rs import TaskContext


def chunks(n: int) -> list[str]:
    return [f"chunk {i}" for i in range(n)]


def make_delegate(events: dict[str, threading.Event]) -> ldp_rs.Delegate:
    delegate = ldp_rs.Delegate("ldp:delegate:streamer")

    @delegate.skill()
    async def count(n: int, ctx: TaskContext) -> int:
        for i, chunk in enumerate(chunks(n)):
            ctx.progress(i / n, f"step {i}")
            ctx.partial(chunk)
            await asyncio.sleep(0.01)
        return n

    @delegate.skill()
    async def sleeper(seconds: float, ctx: TaskContext) -> str:
        ctx.partial("started")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            events["async_cancelled"].set()
            raise
        return "slept"

    @delegate.skill()
    def spinner(seconds: float, ctx: TaskContext) -> str:
        ctx.partial("started")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ctx.cancelled:
                events["sync_cancelled"].set()
                return "stopped"
            time.sleep(0.01)
        return "spun"

    return delegate


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_partial_output_and_progress_stream_in_order(scheme: str) -> None:
    async def main() -> None:
        async with await make_delegate({}).start() as server:
            url = server.url if scheme == "http" else server.ws_url
            async with await ldp_rs.connect(url) as conn:
                stream = await conn.stream("count", 5)
                partials, progress, done = [], [], []
                async for event in stream:
                    if isinstance(event, ldp_rs.Partial):
                        partials.append(event.chunk)
                    elif isinstance(event, ldp_rs.Progress):
                        progress.append(event.message)
                    else:
                        done.append(event.answer)
                assert partials == chunks(5)
                assert progress == [f"step {i}" for i in range(5)]
                assert [d.output for d in done] == [5]
                assert stream.answer is not None and stream.answer.provenance["produced_by"] == server.card["delegate_id"]

    run(main())


@pytest.mark.parametrize("skill,flag", [("sleeper", "async_cancelled"), ("spinner", "sync_cancelled")])
@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_a_cancelled_task_stops_its_skill_and_fails_typed(scheme: str, skill: str, flag: str) -> None:
    events = {"async_cancelled": threading.Event(), "sync_cancelled": threading.Event()}

    async def main() -> None:
        delegate = make_delegate(events)
        async with await delegate.start() as server:
            url = server.url if scheme == "http" else server.ws_url
            async with await ldp_rs.connect(url) as conn:
                stream = await conn.stream(skill, 30)
                first = await stream.__anext__()
                assert first == ldp_rs.Partial("started")
                started = time.monotonic()
                await stream.cancel()
                with pytest.raises(ldp_rs.TaskFailed) as failed:
                    async for _ in stream:
                        pass
                assert failed.value.code == "CANCELLED"
                assert time.monotonic() - started < 10
                # The skill itself was stopped: CancelledError in the coroutine, ctx.cancelled in the function.
                await asyncio.get_running_loop().run_in_executor(None, events[flag].wait, 10)
                assert events[flag].is_set()
                # The connection goes on.
                assert (await conn.call("count", 1)).output == 1

    run(main())
