"""An A2A client on the official A2A Python SDK (a2a-sdk 1.x), driving `ldp serve --a2a` for
ldp-cli/tests/a2a_bridge.rs. Prints one JSON object: the card it resolved and what each step gave.

    python a2a_client.py URL TOKEN|- STEP...

Steps: `send:JSON` (non-streaming SendMessage; JSON is {"text"|"data": ..., "skill": ..., "context": ...}),
`stream:JSON` (SendStreamingMessage, every event), `get` (GetTask of the last task), `cancel:JSON:N` (stream a
task, CancelTask after N events, then read the rest of the stream), `cancel-ended` (CancelTask of the last task,
which has ended: the typed error), `get-unknown`. The task lifecycle: `reply:TEXT` (stream a message continuing the
last task, which waits for input), `history:N` (GetTask of the last task with historyLength N), `list:JSON`
(ListTasks; JSON is {"context": "last"|ID, "state": NAME, "size": N, "next": true to ask for the previous list's next
page, "artifacts": BOOL}), `drop:JSON:N` (stream a task, drop the stream after N events, then SubscribeToTask and
read to the end), `subscribe-ended` (SubscribeToTask of the last task, which has ended: the typed error),
`push-send:JSON` (start a task, answered at once, whose message carries a push config: JSON is the task's spec plus
"push": {"url", "token", "auth", "id"}), `follow` (SubscribeToTask of the last task, read to the end), `push-create:JSON` (CreateTaskPushNotificationConfig for the last task), `push-list`,
`push-get:ID`, `push-delete:ID`.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
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
    if "task" in spec:
        message.task_id = spec["task"]
    send = SendMessageRequest(message=message)
    if "push" in spec:
        send.configuration.task_push_notification_config.CopyFrom(push_config(spec["push"]))
    return send


def push_config(spec: dict, task_id: str = "") -> TaskPushNotificationConfig:
    config = TaskPushNotificationConfig(url=spec["url"], task_id=task_id)
    if "id" in spec:
        config.id = spec["id"]
    if "token" in spec:
        config.token = spec["token"]
    if "auth" in spec:
        config.authentication.CopyFrom(AuthenticationInfo(scheme="Bearer", credentials=spec["auth"]))
    return config


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
        last, last_context, next_page = None, None, ""
        for step in STEPS:
            kind, _, rest = step.partition(":")
            if kind in ("send", "stream", "push-send"):
                client = streaming if kind == "stream" else blocking
                events = []
                send = request(json.loads(rest))
                if kind == "push-send":
                    send.configuration.return_immediately = True
                try:
                    async for event in client.send_message(send):
                        events.append(MessageToDict(event))
                except Exception as e:  # noqa: BLE001 - the test reads the typed error
                    out["steps"].append(error(e))
                    continue
                for event in events:
                    last = event.get("task", {}).get("id") or event.get("statusUpdate", {}).get("taskId") or last
                    last_context = event.get("task", {}).get("contextId") or last_context
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
            elif kind == "reply":
                events = [MessageToDict(e) async for e in streaming.send_message(
                    request({"text": rest, "task": last, "context": last_context}))]
                out["steps"].append({"events": events})
            elif kind == "history":
                task = await streaming.get_task(GetTaskRequest(id=last, history_length=int(rest)))
                out["steps"].append({"task": MessageToDict(task)})
            elif kind == "list":
                spec = json.loads(rest)
                query = ListTasksRequest(page_size=spec.get("size", 0), include_artifacts=spec.get("artifacts", False))
                if spec.get("context"):
                    query.context_id = last_context if spec["context"] == "last" else spec["context"]
                if spec.get("state"):
                    query.status = TaskState.Value(spec["state"])
                if spec.get("next"):
                    query.page_token = next_page
                try:
                    listed = MessageToDict(await streaming.list_tasks(query))
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
                    continue
                next_page = listed.get("nextPageToken", "")
                out["steps"].append({"list": listed})
            elif kind == "drop":
                spec, _, after = rest.rpartition(":")
                events, resumed = [], []
                stream = streaming.send_message(request(json.loads(spec)))
                async for event in stream:
                    events.append(MessageToDict(event))
                    if len(events) == int(after):
                        break
                await stream.aclose()
                task_id = events[0]["task"]["id"]
                async for event in streaming.subscribe(SubscribeToTaskRequest(id=task_id)):
                    resumed.append(MessageToDict(event))
                final = MessageToDict(await streaming.get_task(GetTaskRequest(id=task_id)))
                out["steps"].append({"events": events, "resumed": resumed, "task": final})
                last = task_id
            elif kind == "follow":
                events = [MessageToDict(e) async for e in streaming.subscribe(SubscribeToTaskRequest(id=last))]
                out["steps"].append({"events": events})
            elif kind == "subscribe-ended":
                try:
                    events = [MessageToDict(e) async for e in streaming.subscribe(SubscribeToTaskRequest(id=last))]
                    out["steps"].append({"events": events})
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
            elif kind == "push-create":
                try:
                    created = await streaming.create_task_push_notification_config(push_config(json.loads(rest), last))
                    out["steps"].append({"config": MessageToDict(created)})
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
            elif kind == "push-list":
                listed = await streaming.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=last))
                out["steps"].append({"configs": MessageToDict(listed)})
            elif kind == "push-get":
                try:
                    got = await streaming.get_task_push_notification_config(
                        GetTaskPushNotificationConfigRequest(task_id=last, id=rest))
                    out["steps"].append({"config": MessageToDict(got)})
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
            elif kind == "push-delete":
                await streaming.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(task_id=last, id=rest))
                out["steps"].append({"deleted": rest})
            elif kind == "get-unknown":
                try:
                    await streaming.get_task(GetTaskRequest(id="no-such-task"))
                    out["steps"].append({"found": "unexpectedly"})
                except Exception as e:  # noqa: BLE001
                    out["steps"].append(error(e))
    print(json.dumps(out))


asyncio.run(main())
