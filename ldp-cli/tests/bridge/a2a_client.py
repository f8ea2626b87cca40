"""An A2A client on the official A2A Python SDK (a2a-sdk 1.x), driving `ldp serve --a2a` for
ldp-cli/tests/a2a_bridge.rs. Prints one JSON object: the card it resolved and what each step gave.

    python a2a_client.py URL TOKEN|- STEP...

Steps: `send:JSON` (non-streaming SendMessage; JSON is {"text"|"data": ..., "skill": ..., "context": ...}),
`stream:JSON` (SendStreamingMessage, every event), `get` (GetTask of the last task), `cancel:JSON:N` (stream a
task, CancelTask after N events, then read the rest of the stream), `cancel-ended` (CancelTask of the last task,
which has ended: the typed error).
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct, Value

URL, TOKEN, STEPS = sys.argv[1], sys.argv[2], sys.argv[3:]


def request(spec: dict) -> SendMessageRequest:
    if "text" in spec:
        part = Part(text=spec["text"])
    else:
        part = Part(data=ParseDict(spec["data"], Value()))
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[part])
    if "context" in spec:
        message.context_id = spec["context"]
    if "skill" in spec:
        meta = Struct()
        meta.update({"ldp/skill": spec["skill"]})
        message.metadata.CopyFrom(meta)
    return SendMessageRequest(message=message)


def error(e: Exception) -> dict:
    return {"error": type(e).__name__, "message": str(e), "data": getattr(e, "data", None)}


async def main() -> None:
    headers = {} if TOKEN == "-" else {"Authorization": f"Bearer {TOKEN}"}
    out = {"steps": []}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, URL).get_agent_card()
        out["card"] = MessageToDict(card)
        streaming = await create_client(card, ClientConfig(httpx_client=http, streaming=True))
        blocking = await create_client(card, ClientConfig(httpx_client=http, streaming=False))
        last = None
        for step in STEPS:
            kind, _, rest = step.partition(":")
            if kind in ("send", "stream"):
                client = blocking if kind == "send" else streaming
                events = []
                try:
                    async for event in client.send_message(request(json.loads(rest))):
                        events.append(MessageToDict(event))
                except Exception as e:  # noqa: BLE001 - the test reads the typed error
                    out["steps"].append(error(e))
                    continue
                for event in events:
                    last = event.get("task", {}).get("id") or event.get("statusUpdate", {}).get("taskId") or last
                out["steps"].append({"events": events})
            elif kind == "get":
                task = await streaming.get_task(GetTaskRequest(id=last))
                out["steps"].append({"task": MessageToDict(task)})
            elif kind == "cancel-ended":
                try:
                    await streaming.cancel_task(CancelTaskRequest(id=last))
                    out["steps"].append({"cancelled": "unexpectedly"})
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
            elif kind == "cancel":
                spec, _, after = rest.rpartition(":")
                events, cancelled = [], None
                async for event in streaming.send_message(request(json.loads(spec))):
                    events.append(MessageToDict(event))
                    if len(events) == int(after) and cancelled is None:
                        task_id = events[0]["task"]["id"]
                        cancelled = MessageToDict(await streaming.cancel_task(CancelTaskRequest(id=task_id)))
                out["steps"].append({"events": events, "cancelled": cancelled})
            elif kind == "get-unknown":
                try:
                    await streaming.get_task(GetTaskRequest(id="no-such-task"))
                    out["steps"].append({"found": "unexpectedly"})
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
    print(json.dumps(out))


asyncio.run(main())
