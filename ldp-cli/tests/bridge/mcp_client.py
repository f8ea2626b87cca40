"""The official MCP Python SDK as a client of an LDP delegate's MCP bridge (ldp-cli/tests/mcp_bridge.rs).

    python mcp_client.py TARGET MODE STEPS...

TARGET is an http(s) URL (Streamable HTTP) or `stdio:CMD ARG...` (a stdio server the SDK starts). MODE is the
SDK's connect mode (`legacy`: the initialize handshake and an MCP session; `auto`: discover first). Each STEP is
`list`, `call:TOOL:JSON_ARGS` (a call; its result and the progress notifications it got),
`cancel:TOOL:JSON_ARGS:SECS` (a call abandoned after SECS seconds once progress has arrived: the SDK sends
notifications/cancelled), `concurrent:TOOL:JSON_ARGS:N` (N calls at once in the session; their results), or
`pause:SECS` (the session stays open meanwhile), or `loglevel:LEVEL` (`logging/setLevel`), or `awaitlog:N:SECS`
(waits until N log messages have come in all, or SECS have passed: they ride the GET stream, so may trail a result), or
`resources:TOOL:JSON_ARGS` (a call during which the task's resources are found in `resources/list`, its result and
provenance subscribed and its result read while it runs; after it, the list, the templates and each resource read).
`prompts` (`prompts/list`), or `prompt:NAME:JSON_ARGS` (`prompts/get`; an error is recorded as such).
Prints one JSON object: what each step saw, as the SDK decoded it, under `log` every `notifications/message`
received, under `updated` the URI of every `notifications/resources/updated` and under `list_changed` how many
`notifications/resources/list_changed` came.
"""

import json
import sys

import anyio
from mcp import Client, StdioServerParameters


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main() -> None:
    target, mode, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
    if target.startswith("stdio:"):
        cmd = target[len("stdio:"):].split(" ")
        server = StdioServerParameters(command=cmd[0], args=cmd[1:])
    else:
        server = target
    out: dict = {"steps": [], "log": [], "updated": [], "list_changed": 0}

    async def on_log(params):
        out["log"].append(dump(params))

    async def on_message(message):
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method == "notifications/resources/updated":
            out["updated"].append(root.params.uri)
        elif method == "notifications/resources/list_changed":
            out["list_changed"] += 1

    async with Client(
        server, mode=mode, read_timeout_seconds=60, logging_callback=on_log, message_handler=on_message
    ) as client:
        info = client.server_info
        out["server_info"] = dump(info) if info is not None else None
        out["protocol_version"] = client.protocol_version
        for step in steps:
            kind, _, rest = step.partition(":")
            if kind == "list":
                tools = await client.list_tools()
                out["steps"].append({"list": [dump(t) for t in tools.tools]})
            elif kind == "call":
                name, _, args = rest.partition(":")
                progress: list = []

                async def on_progress(value, total, message, progress=progress):
                    progress.append({"progress": value, "total": total, "message": message})

                result = await client.call_tool(name, json.loads(args), progress_callback=on_progress)
                out["steps"].append({"call": dump(result), "progress": progress})
            elif kind == "cancel":
                name, _, rest = rest.partition(":")
                args, _, secs = rest.rpartition(":")
                progress = []
                started = anyio.Event()

                async def on_progress(value, total, message, progress=progress, started=started):
                    progress.append({"progress": value, "total": total, "message": message})
                    started.set()

                finished = None
                async with anyio.create_task_group() as tg:

                    async def call():
                        nonlocal finished
                        finished = await client.call_tool(name, json.loads(args), progress_callback=on_progress)

                    tg.start_soon(call)
                    with anyio.fail_after(30):
                        await started.wait()
                    await anyio.sleep(float(secs))
                    tg.cancel_scope.cancel()
                out["steps"].append({"cancelled": finished is None, "progress": progress})
            elif kind == "concurrent":
                name, _, rest = rest.partition(":")
                args, _, count = rest.rpartition(":")
                results: list = []

                async def one(name=name, args=args, results=results):
                    results.append(dump(await client.call_tool(name, json.loads(args))))

                async with anyio.create_task_group() as tg:
                    for _ in range(int(count)):
                        tg.start_soon(one)
                out["steps"].append({"concurrent": results})
            elif kind == "resources":
                name, _, args = rest.partition(":")
                seen: dict = {}
                async with anyio.create_task_group() as tg:

                    async def call(name=name, args=args, seen=seen):
                        seen["call"] = dump(await client.call_tool(name, json.loads(args)))

                    tg.start_soon(call)
                    with anyio.fail_after(30):
                        while True:
                            listed = await client.list_resources()
                            found = [r.uri for r in listed.resources if r.uri.endswith("/result")]
                            if found:
                                break
                            await anyio.sleep(0.05)
                    result = found[0]
                    provenance = result[: -len("result")] + "provenance"
                    await client.subscribe_resource(result)
                    await client.subscribe_resource(provenance)
                    seen["running_list"] = [dump(r) for r in listed.resources]
                    seen["running"] = dump(await client.read_resource(result))
                    seen["running_called"] = "call" in seen
                lctl = result[: -len("result")] + "lctl"
                seen["list"] = [dump(r) for r in (await client.list_resources()).resources]
                seen["templates"] = [dump(t) for t in (await client.list_resource_templates()).resource_templates]
                seen["reads"] = {u: dump(await client.read_resource(u)) for u in (result, provenance, lctl)}
                try:
                    await client.read_resource("ldp://tasks/no-such-task/result")
                    seen["unknown"] = "found"
                except Exception as e:  # noqa: BLE001 - the test reads the error
                    seen["unknown"] = {"error": type(e).__name__, "message": str(e)}
                out["steps"].append({"resources": seen})
            elif kind == "prompts":
                out["steps"].append({"prompts": [dump(p) for p in (await client.list_prompts()).prompts]})
            elif kind == "prompt":
                name, _, args = rest.partition(":")
                try:
                    out["steps"].append({"prompt": dump(await client.get_prompt(name, json.loads(args)))})
                except Exception as e:  # noqa: BLE001 - the test reads the error
                    out["steps"].append({"error": type(e).__name__, "message": str(e)})
            elif kind == "pause":
                await anyio.sleep(float(rest))
            elif kind == "awaitlog":
                count, _, secs = rest.partition(":")
                with anyio.move_on_after(float(secs)):
                    while len(out["log"]) < int(count):
                        await anyio.sleep(0.02)
            elif kind == "loglevel":
                out["steps"].append({"loglevel": dump(await client.set_logging_level(rest))})
            else:
                raise SystemExit(f"unknown step {step!r}")
    print(json.dumps(out))


anyio.run(main)
