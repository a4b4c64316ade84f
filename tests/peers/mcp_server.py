"""An MCP server written with the `mcp` package (PyPI), for the MCP client's interop tests.

Runs over stdio by default; with `--http PORT` it serves Streamable HTTP at
`http://127.0.0.1:PORT/mcp` (port 0 picks a free one) and prints
`READY http://127.0.0.1:PORT/mcp` once it listens. It speaks every protocol version the
package knows (2026-07-28 through `server/discover`, older ones through `initialize`); with
`--legacy` only the `initialize` handshake (2025-11-25 and older, with HTTP sessions), as a
server written before 2026-07-28.

Tools (every one but `echo` is left without `readOnlyHint`):
  echo(text, times=1)      text repeated `times` times, joined by spaces (readOnlyHint)
  image()                  text + a 1x1 PNG image
  audio()                  text + a short WAV clip
  resource()               text + an embedded text resource + an embedded blob resource
  resource_link()          text + a resource link
  structured(city)         structuredContent {city, temperature, conditions} + its JSON as text
  fail(reason)             an error result (isError) whose text holds `reason`
  slow(seconds, marker="") sleeps; if cancelled, writes "cancelled" to the file `marker`
  crash(code=3)            the process exits at once, without answering
  pid()                    this process's id, as text
"""

import argparse
import base64
import os
import socket
import struct
import sys
import zlib
from typing import Annotated

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel, Field


def tiny_png() -> bytes:
    """A valid 1x1 red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def tiny_wav() -> bytes:
    """A valid 8 kHz mono 8-bit WAV of 80 samples (10 ms of silence)."""
    samples = b"\x80" * 80
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 8000, 1, 8)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


PNG_B64 = base64.b64encode(tiny_png()).decode()
WAV_B64 = base64.b64encode(tiny_wav()).decode()
BLOB_B64 = base64.b64encode(b"\x00\x01\x02mew").decode()

server = MCPServer(name="mew-test-python", version="1.0.0", log_level="WARNING")


@server.tool(
    annotations=ToolAnnotations(read_only_hint=True),
    description="Echoes text, `times` times.",
    structured_output=False,
)
def echo(text: str, times: int = 1) -> str:
    return " ".join([text] * times)


@server.tool(description="Returns a 1x1 PNG image.")
def image() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text="a red pixel:"),
            ImageContent(type="image", data=PNG_B64, mime_type="image/png"),
        ]
    )


@server.tool(description="Returns a short WAV clip.")
def audio() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text="ten milliseconds of silence:"),
            AudioContent(type="audio", data=WAV_B64, mime_type="audio/wav"),
        ]
    )


@server.tool(description="Returns embedded resources: one text, one blob.")
def resource() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text="two embedded resources:"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="mew-test://notes/readme.txt", mime_type="text/plain", text="embedded text body"
                ),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="mew-test://blobs/data.bin", mime_type="application/octet-stream", blob=BLOB_B64
                ),
            ),
        ]
    )


@server.tool(description="Returns a link to a resource.")
def resource_link() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text="one link:"),
            ResourceLink(
                type="resource_link",
                uri="mew-test://files/report.pdf",
                name="report.pdf",
                description="the quarterly report",
                mime_type="application/pdf",
            ),
        ]
    )


class Weather(BaseModel):
    city: str
    temperature: int
    conditions: str


@server.tool(description="Returns structured weather for a city.")
def structured(city: str) -> Weather:
    return Weather(city=city, temperature=21, conditions="sunny")


@server.tool(description="Always fails with an error result.", structured_output=False)
def fail(reason: str) -> str:
    raise ToolError(f"failed on purpose: {reason}")


@server.tool(
    description="Sleeps `seconds`; writes 'cancelled' to the file `marker` if cancelled.",
    structured_output=False,
)
async def slow(
    seconds: Annotated[float, Field(ge=0)],
    marker: str = "",
) -> str:
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        if marker:
            with open(marker, "w") as f:
                f.write("cancelled")
        raise
    return f"slept {seconds} s"


@server.tool(description="Exits the process at once, without answering.", structured_output=False)
def crash(code: int = 3) -> str:
    sys.stdout.flush()
    os._exit(code)


@server.tool(description="Returns this process's id.", structured_output=False)
def pid() -> str:
    return str(os.getpid())


async def serve_stdio_legacy() -> None:
    """stdio in the handshake era only (`MCPServer.run` picks the era from the first request)."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read_stream, write_stream):
        async with lowlevel.lifespan(lowlevel) as state:
            await serve_loop(
                lowlevel,
                read_stream,
                write_stream,
                lifespan_state=state,
                init_options=lowlevel.create_initialization_options(),
            )


async def serve_http(port: int) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.set_inheritable(True)
    port = sock.getsockname()[1]
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn_server = uvicorn.Server(config)
    # Connections made before serve() accepts wait in the listen backlog.
    print(f"READY http://127.0.0.1:{port}/mcp", flush=True)
    await uvicorn_server.serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--legacy", action="store_true", help="answer server/discover with 'Method not found'")
    args = parser.parse_args()
    if args.legacy:
        # The package has no switch for this: drop its server/discover handler (HTTP then
        # answers the probe with 'Method not found'), and serve stdio with the handshake loop.
        server._lowlevel_server._request_handlers.pop("server/discover")
    if args.http is not None:
        anyio.run(serve_http, args.http)
    elif args.legacy:
        anyio.run(serve_stdio_legacy)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
