"""An MCP server on the official MCP Python SDK (MCPServer, formerly FastMCP), run on stdio behind
`ldp serve --backend mcp` by ldp-cli/tests/mcp_bridge.rs.

    python mcp_server.py MARKER_DIR

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


server.run("stdio")
