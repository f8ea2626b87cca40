"""An A2A agent on the official A2A Python SDK (a2a-sdk 1.x, its JSON-RPC binding on Starlette), run behind
`ldp serve --backend a2a` by ldp-cli/tests/a2a_bridge.rs and the cross-protocol routing test.

    python a2a_agent.py PORT_FILE MARKER_DIR

It binds 127.0.0.1:0, writes its base URL to PORT_FILE, and serves until killed. Skills (picked by the message
metadata `ldp/skill`, as the LDP bridge sends it): `shout` (the text upper-cased, as an artifact), `slow` (reports
`steps` progress updates, then waits; writes MARKER_DIR/cancelled when cancelled), `fail` (a failed task), `ask`
(multi-turn: asks "who is asking?" with input-required, then greets the answer, naming the first message's text),
`count` (reports `n` steps `pause` seconds apart, then answers "counted N"), `flaky` (like `count`, but the HTTP
connection of the first stream that carries a "step 2" event is cut there, once: the task goes on).
"""

import asyncio
import json
import socket
import sys
from pathlib import Path

import uvicorn
from a2a.helpers import get_data_parts, new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette

PORT_FILE, MARKERS = Path(sys.argv[1]), Path(sys.argv[2])


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        meta = MessageToDict(message.metadata) if message and message.HasField("metadata") else {}
        skill = meta.get("ldp/skill", "shout")
        text = context.get_user_input()
        task_id, context_id = context.task_id, context.context_id
        current = context.current_task
        if current is None:
            await event_queue.enqueue_event(new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        if skill == "ask":
            if current is not None and current.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                first = ASKED.pop(task_id, "?")
                await updater.add_artifact([new_text_part(f"hello {text}, you asked {first}")], name="ask")
                await updater.complete()
            else:
                ASKED[task_id] = text
                question = new_text_message("who is asking?", context_id=context_id, task_id=task_id)
                await updater.requires_input(question)
        elif skill in ("count", "flaky"):
            if skill == "flaky":
                FLAKY.add(task_id)
            data = get_data_parts(message.parts) if message else []
            spec = data[0] if data else json.loads(text)
            for step in range(int(spec.get("n", 3))):
                await asyncio.sleep(float(spec.get("pause", 0.2)))
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    message=new_text_message(f"step {step + 1}", context_id=context_id, task_id=task_id),
                )
            await updater.add_artifact([new_text_part(f"counted {int(spec.get('n', 3))}")], name=skill)
            await updater.complete()
        elif skill == "shout":
            await updater.add_artifact([new_text_part(text.upper())], name="shout", last_chunk=True)
            await updater.complete()
        elif skill == "slow":
            # The LDP bridge sends a JSON object input as a data part, a string as a text part.
            data = get_data_parts(message.parts) if message else []
            steps = int((data[0] if data else json.loads(text)).get("steps", 3))
            try:
                for step in range(steps):
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING,
                        message=new_text_message(f"step {step + 1}", context_id=context_id, task_id=task_id),
                    )
                await asyncio.sleep(60)
                await updater.complete()
            except asyncio.CancelledError:
                (MARKERS / "cancelled").write_text("cancelled")
                raise
        else:
            await updater.failed(new_text_message(f"refused: {text}", context_id=context_id, task_id=task_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        (MARKERS / "cancel-called").write_text("yes")
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class CutOnce:
    """ASGI middleware: cuts the connection of the first event stream that carries a "step 2" event of a `flaky`
    task, once (an HTTP body that stops mid-stream, as a dropped proxy or network would leave it)."""

    def __init__(self, app):
        self.app = app
        self.cut = False

    async def __call__(self, scope, receive, send):
        async def guarded(message):
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            if not self.cut and b"step 2" in body and flaky_marker(body):
                self.cut = True
                (MARKERS / "stream-cut").write_text("yes")
                raise ConnectionAbortedError("the test cuts this stream")
            await send(message)

        await self.app(scope, receive, guarded)


def flaky_marker(body: bytes) -> bool:
    return any(task in body.decode(errors="replace") for task in FLAKY)


FLAKY: set[str] = set()
# The first message of each `ask` task waiting for its answer.
ASKED: dict[str, str] = {}


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # Listening before the URL is written: a client that reads it at once is queued, not refused.
    sock.listen(128)
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    skill = lambda id, description: AgentSkill(id=id, name=id, description=description, tags=["test"])  # noqa: E731
    card = AgentCard(
        name="bridge-test-agent",
        description="A test agent.",
        version="2.7.1",
        supported_interfaces=[AgentInterface(url=url + "/", protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[skill("shout", "Upper-cases the text."), skill("slow", "Reports progress, then waits."),
                skill("fail", "Always fails."), skill("ask", "Asks who is asking, then greets them."),
                skill("count", "Counts, reporting each step."), skill("flaky", "Counts; its first stream is cut.")],
    )
    handler = DefaultRequestHandler(agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card)
    app = CutOnce(Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/")))
    PORT_FILE.write_text(url)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    asyncio.run(server.serve(sockets=[sock]))


main()
