"""An MCP server on the official MCP Python SDK (MCPServer, formerly FastMCP), run on stdio behind
`ldp serve --backend mcp` by ldp-cli/tests/mcp_bridge.rs.

    python mcp_server.py MARKER_DIR                     # on stdio (--mcp-command)
    python mcp_server.py MARKER_DIR URL_FILE TOKEN      # Streamable HTTP on a free loopback port (--mcp-url)

In HTTP mode it writes its URL to URL_FILE once listening, and answers 401 to a request without
`Authorization: Bearer TOKEN`.
Tools: `add` (structured output), `slow` (reports progress, then waits; writes MARKER_DIR/cancelled when the call
is cancelled), `fail` (a tool error).
"""

import sys
from pathlib import Path
from typing import TypedDict

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

MARKERS = Path(sys.argv[1])
server = MCPServer("bridge-test-server", version="3.1.4")


class Sum(TypedDict):
    sum: int


@server.tool(description="Adds two integers.")
def add(a: int, b: int) -> Sum:
    return {"sum": a + b}


@server.tool(description="Reports progress, then waits until cancelled.", annotations={"readOnlyHint": True})
async def slow(steps: int, ctx: Context) -> str:
    try:
        for step in range(steps):
            await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        await anyio.sleep(60)
        return "finished"
    except anyio.get_cancelled_exc_class():
        (MARKERS / "cancelled").write_text("cancelled")
        raise


@server.tool(description="Always fails.")
def fail(reason: str) -> str:
    # A ToolError's message reaches the caller (other exceptions are masked as "Error executing tool").
    raise ToolError(f"refused: {reason}")




def serve_http(url_file: str, token: str) -> None:
    import socket

    import uvicorn

    app = server.streamable_http_app()

    async def with_token(scope, receive, send):
        headers = dict(scope.get("headers") or [])
        if scope["type"] == "http" and headers.get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(with_token, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)

    async def main():
        async def announce():
            while not uv.started:
                await anyio.sleep(0.05)
            Path(url_file).write_text(f"http://127.0.0.1:{port}/mcp")

        async with anyio.create_task_group() as tg:
            tg.start_soon(announce)
            await uv.serve(sockets=[sock])

    anyio.run(main)


if len(sys.argv) > 3:
    serve_http(sys.argv[2], sys.argv[3])
else:
    server.run("stdio")
