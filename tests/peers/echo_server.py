"""Echo agent served by the a2a-sdk server, for interop tests.

Serves JSON-RPC (POST /) and HTTP+JSON (/message:send, /tasks/...) on one
port, with the agent card at /.well-known/agent-card.json, and gRPC (the SDK's
``grpc`` extra) on a second port, which the card lists as its GRPC interface.
The bindings share one request handler, so a task started on one is seen on the
others. Prints exactly one line ``READY <base_url>`` to stdout once both accept
connections.

With ``--otlp ENDPOINT`` it traces with OpenTelemetry (``peer_tracing.py``): the
ASGI middleware makes a SERVER span per request whose parent is the request's
``traceparent``, the SDK's own spans (its ``telemetry`` extra) sit below it, and
every span is exported to ``ENDPOINT/v1/traces`` as it ends, under the service
name ``--service-name`` (default ``python-peer``).

Commands (first text part of the incoming message):
  echo <text>     WORKING, artifact "echo" with <text>, COMPLETED
  stream <n>      WORKING, n artifact chunks "chunk <i>", COMPLETED
  ask             INPUT_REQUIRED "need input"; a follow-up <t> completes
                  with artifact "got <t>"
  wait            WORKING until canceled
  fail            FAILED with "failed on purpose"
  message <text>  a direct Message (no task) with <text>
  anything else   like "echo <whole text>"
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
import uuid

import grpc
import httpx
import uvicorn
from a2a.helpers import get_text_parts, new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
    TaskUpdater,
)
from a2a.types import a2a_pb2_grpc
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Role,
    TaskState,
)
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

CHUNK_DELAY_S = 0.02


def _command(context: RequestContext) -> tuple[str, str]:
    """Splits the first text part into (command, rest)."""
    texts = get_text_parts(context.message.parts) if context.message else []
    text = texts[0] if texts else ''
    head, _, rest = text.strip().partition(' ')
    if head in {'echo', 'stream', 'ask', 'wait', 'fail', 'message'}:
        return head, rest
    return 'echo', text


class EchoExecutor(AgentExecutor):
    """Implements the scripted behaviours listed in the module docstring."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Runs one request against the task named by the context."""
        assert context.message is not None and context.task_id and context.context_id
        command, arg = _command(context)
        task = context.current_task
        if task is None and command == 'message':
            reply = new_text_message(arg, context_id=context.context_id, role=Role.ROLE_AGENT)
            await event_queue.enqueue_event(reply)
            return
        if task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        # A follow-up naming only the taskId gets a fresh contextId from the SDK: keep the task's.
        updater = TaskUpdater(event_queue, context.task_id, task.context_id if task else context.context_id)
        if task is not None and task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            texts = get_text_parts(context.message.parts)
            await updater.add_artifact([new_text_part(f'got {texts[0] if texts else ""}')], name='echo')
            await updater.complete()
            return
        await updater.start_work()
        if command == 'stream':
            await self._stream(updater, int(arg or '1'))
        elif command == 'ask':
            await updater.requires_input(updater.new_agent_message([new_text_part('need input')]))
        elif command == 'wait':
            await asyncio.Event().wait()
        elif command == 'fail':
            await updater.failed(updater.new_agent_message([new_text_part('failed on purpose')]))
        else:
            await updater.add_artifact([new_text_part(arg)], name='echo')
            await updater.complete()

    @staticmethod
    async def _stream(updater: TaskUpdater, count: int) -> None:
        artifact_id = str(uuid.uuid4())
        for i in range(1, count + 1):
            await updater.add_artifact(
                [new_text_part(f'chunk {i}')],
                artifact_id=artifact_id,
                name='stream',
                append=i > 1,
                last_chunk=i == count,
            )
            await asyncio.sleep(CHUNK_DELAY_S)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Marks the task CANCELED; the SDK then stops the running execute()."""
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def build_card(base_url: str, grpc_url: str | None = None, extended: bool = False) -> AgentCard:
    """The echo agent's card (with a GRPC interface at `grpc_url`, when given); `extended` adds a
    skill for GetExtendedAgentCard."""
    skills = [
        AgentSkill(
            id='echo',
            name='Echo',
            description='Echoes text; scripted commands drive task states.',
            tags=['echo', 'test'],
            examples=['echo hi', 'stream 3', 'ask', 'wait', 'fail', 'message hi'],
        )
    ]
    if extended:
        skills.append(AgentSkill(id='secret', name='Secret', description='Extended only.', tags=['extended']))
    interfaces = [
        AgentInterface(url=f'{base_url}/', protocol_binding='JSONRPC', protocol_version='1.0'),
        AgentInterface(url=base_url, protocol_binding='HTTP+JSON', protocol_version='1.0'),
    ]
    if grpc_url:
        interfaces.append(AgentInterface(url=grpc_url, protocol_binding='GRPC', protocol_version='1.0'))
    return AgentCard(
        name='Echo Peer',
        description='a2a-sdk echo agent for interop tests',
        version='1.0.0',
        supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=skills,
    )


def build_handler(base_url: str, grpc_url: str) -> DefaultRequestHandler:
    """The request handler every binding serves."""
    push_store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=build_card(base_url, grpc_url),
        extended_agent_card=build_card(base_url, grpc_url, extended=True),
        push_config_store=push_store,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), push_store),
    )
    return handler


def build_app(base_url: str, grpc_url: str, handler: DefaultRequestHandler) -> Starlette:
    """Card, JSON-RPC and REST routes on one Starlette app (card first)."""
    routes: list[BaseRoute] = [
        *create_agent_card_routes(build_card(base_url, grpc_url)),
        *create_jsonrpc_routes(handler, rpc_url='/'),
        *create_rest_routes(handler),
    ]
    return Starlette(routes=routes)


def traced(app: Starlette, endpoint: str, service_name: str) -> ASGIApp:
    """`app` inside OpenTelemetry's ASGI middleware, exporting to `endpoint`."""
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    import peer_tracing

    peer_tracing.configure(service_name, endpoint)
    return OpenTelemetryMiddleware(app)


async def serve(host: str, port: int, otlp: str | None = None, service_name: str = 'python-peer') -> None:
    """Binds, serves, and prints READY once connections are accepted."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    base_url = f'http://{host}:{sock.getsockname()[1]}'
    grpc_server = grpc.aio.server()
    grpc_port = grpc_server.add_insecure_port(f'{host}:0')
    # As the SDK's own examples write a gRPC address: host:port, no scheme.
    grpc_url = f'{host}:{grpc_port}'
    handler = build_handler(base_url, grpc_url)
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), grpc_server)
    await grpc_server.start()
    app: ASGIApp = build_app(base_url, grpc_url, handler)
    if otlp:
        app = traced(app, otlp, service_name)
    config = uvicorn.Config(app, log_config=None, access_log=False, log_level='warning')
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if server.started:
        print(f'READY {base_url}', flush=True)
    await serving


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0, help='0 picks a free port')
    parser.add_argument('--otlp', metavar='ENDPOINT', help='trace, exporting spans to ENDPOINT/v1/traces')
    parser.add_argument('--service-name', default='python-peer', help='service.name of the spans (with --otlp)')
    args = parser.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    asyncio.run(serve(args.host, args.port, args.otlp, args.service_name))


if __name__ == '__main__':
    main()
