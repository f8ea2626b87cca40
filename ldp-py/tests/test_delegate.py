"""Delegates: sync and async skills, schemas from annotations and Pydantic models, the task context, exceptions as
typed TASK_FAILED, the server in the caller's loop and on its own thread, the configuration, the typed errors."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pydantic
import pytest

import ldp_rs
from conftest import free_port, run
from ldp_rs import TaskContext


class Doc(pydantic.BaseModel):
    title: str
    words: list[str]


class Summary(pydantic.BaseModel):
    title: str
    count: int


def summary_of(doc: Doc) -> Summary:
    return Summary(title=doc.title, count=len(doc.words))


def make_delegate(**settings: Any) -> ldp_rs.Delegate:
    delegate = ldp_rs.Delegate("ldp:delegate:pytest", model=("pytest", "1"), **settings)

    @delegate.skill()
    def upper(text: str, ctx: TaskContext) -> str:
        """Upper-cases its input, numbering the session's turns."""
        return f"{text.upper()} (turn {len(ctx.history) + 1})"

    @delegate.skill(description="counts the words of a document", quality=0.8)
    async def summarize(doc: Doc) -> Summary:
        await asyncio.sleep(0)
        return summary_of(doc)

    @delegate.skill()
    def boom(x: int) -> int:
        raise ValueError(f"no {x}")

    @delegate.skill()
    async def refuse(x: int) -> int:
        raise ldp_rs.TaskFailed(f"over budget by {x}", code="BUDGET_EXCEEDED", category="policy", retryable=True)

    @delegate.skill()
    async def where(_: Any) -> str:
        return threading.current_thread().name

    @delegate.skill()
    def measured(text: str) -> ldp_rs.Output:
        return ldp_rs.Output(text, tokens=len(text), cost_usd=0.25, confidence=0.5)

    return delegate


def test_the_card_carries_the_schemas_of_annotations_and_models() -> None:
    async def main() -> None:
        async with await make_delegate().start() as server:
            skills = {c["name"]: c for c in server.card["capabilities"]}
            assert set(skills) == {"upper", "summarize", "boom", "refuse", "where", "measured"}
            assert skills["upper"]["input_schema"] == pydantic.TypeAdapter(str).json_schema()
            assert skills["upper"]["description"] == "Upper-cases its input, numbering the session's turns."
            assert skills["summarize"]["input_schema"] == Doc.model_json_schema()
            assert skills["summarize"]["output_schema"] == Summary.model_json_schema()
            assert skills["summarize"]["description"] == "counts the words of a document"
            assert skills["summarize"]["quality"]["quality_score"] == 0.8
            # The client sees the same card through discovery.
            async with await ldp_rs.connect(server.url) as conn:
                assert conn.card == server.card

    run(main())


def test_sync_and_async_skills_answer_in_the_callers_loop() -> None:
    async def main() -> None:
        async with await make_delegate().start() as server:
            async with await ldp_rs.connect(server.url) as conn:
                first = await conn.call("upper", "hi")
                assert first.output == "HI (turn 1)"
                assert first.provenance["produced_by"] == "ldp:delegate:pytest"
                assert first.provenance["model_version"] == "1"
                second = await conn.call("upper", "again")  # the same session: one earlier turn
                assert second.output == "AGAIN (turn 2)"
                doc = Doc(title="t", words=["a", "b", "c"])
                answer = await conn.call("summarize", doc, output_type=Summary)
                assert answer.output == summary_of(doc)
                # An async skill runs on the loop that started the server.
                assert (await conn.call("where", None)).output == threading.current_thread().name

    run(main())


def test_usage_figures_reach_the_provenance() -> None:
    async def main() -> None:
        async with await make_delegate().start() as server, await ldp_rs.connect(server.url) as conn:
            answer = await conn.call("measured", "four")
            assert answer.output == "four"
            assert answer.provenance["tokens_used"] == len("four")
            assert answer.provenance["cost_usd"] == 0.25
            assert answer.provenance["confidence"] == 0.5

    run(main())


def test_an_input_that_does_not_fit_is_a_typed_capability_error() -> None:
    async def main() -> None:
        async with await make_delegate().start() as server, await ldp_rs.connect(server.url) as conn:
            with pytest.raises(ldp_rs.TaskFailed) as failed:
                await conn.call("summarize", {"title": 3})
            assert failed.value.code == ldp_rs.INVALID_INPUT
            assert failed.value.category == "capability"
            assert failed.value.retryable is False

    run(main())


def test_an_exception_in_a_skill_is_a_typed_task_failed_and_the_server_goes_on() -> None:
    async def main() -> None:
        async with await make_delegate().start() as server, await ldp_rs.connect(server.url) as conn:
            with pytest.raises(ldp_rs.TaskFailed) as failed:
                await conn.call("boom", 7)
            assert (failed.value.code, failed.value.category) == ("EXECUTION_FAILED", "runtime")
            assert "ValueError: no 7" in failed.value.message
            with pytest.raises(ldp_rs.TaskFailed) as refused:
                await conn.call("refuse", 3)
            assert (refused.value.code, refused.value.category) == ("BUDGET_EXCEEDED", "policy")
            assert refused.value.retryable is True
            assert refused.value.message == "over budget by 3"
            assert (await conn.call("upper", "still here")).output.startswith("STILL HERE")
            assert server.running

    run(main())


def test_a_server_on_its_own_thread_runs_async_skills_on_its_own_loop() -> None:
    with make_delegate().start_in_thread() as server:

        async def main() -> tuple[str, str]:
            async with await ldp_rs.connect(server.url) as conn:
                return (await conn.call("where", None)).output, (await conn.call("upper", "x")).output

        thread, upper = run(main())
        assert thread == "ldp_rs-skills"
        assert upper == "X (turn 2)"  # "where" was the first turn
        assert server.running
    assert not server.running


def test_the_configuration_applies_limits() -> None:
    async def main() -> None:
        delegate = make_delegate(config={"sessions": {"max_sessions": 1, "max_sessions_per_peer": 1}})
        async with await delegate.start() as server:
            first = await ldp_rs.connect(server.url)
            await first.call("upper", "one")
            second = await ldp_rs.connect(server.url)
            with pytest.raises(ldp_rs.TaskFailed) as refused:
                await second.call("upper", "two")
            assert refused.value.code == "CAPACITY_EXCEEDED"
            assert refused.value.retryable is True

    run(main())


def test_mistakes_are_typed_errors() -> None:
    with pytest.raises(ldp_rs.UsageError):
        ldp_rs.Delegate("not-a-delegate-id").start_in_thread()
    delegate = ldp_rs.Delegate("ldp:delegate:x")

    @delegate.skill()
    def one(x: int) -> int:
        return x

    with pytest.raises(ldp_rs.UsageError):

        @delegate.skill("one")
        def again(x: int) -> int:
            return x

    with pytest.raises(ldp_rs.UsageError):

        @delegate.skill()
        def three(a: int, b: int, c: int) -> int:
            return a

    with pytest.raises(ldp_rs.UsageError, match="no_such_key"):
        ldp_rs.Delegate("ldp:delegate:x", config={"no_such_key": 1}).start_in_thread()
    with pytest.raises(ldp_rs.UsageError):
        ldp_rs.SigningKey("rot13", "secret")
    with delegate.start_in_thread() as server:
        port = server.url.rsplit(":", 1)[1]
        with pytest.raises(ldp_rs.ServerError):
            delegate.start_in_thread(f"127.0.0.1:{port}")

    async def clients() -> None:
        with pytest.raises(ldp_rs.TransportError):
            await ldp_rs.connect(f"http://127.0.0.1:{free_port()}", retries=0, connect_timeout=2)
        with pytest.raises(ldp_rs.UsageError):
            await ldp_rs.connect("ftp://127.0.0.1:1")
        with pytest.raises(ldp_rs.UsageError):
            await ldp_rs.connect("http://127.0.0.1:1", no_such_option=1)

    run(clients())
