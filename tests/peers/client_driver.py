"""A2A client CLI built on the a2a-sdk client, driven by interop tests.

Usage: client_driver.py --url BASE_URL --binding jsonrpc|rest|grpc SCENARIO [ARGS]

Scenarios: card | send TEXT | stream TEXT | get TASK_ID | cancel TASK_ID |
subscribe TASK_ID | list [--context ID] [--page-size N] [--page-token T] |
roundtrip. send/stream also take --context ID, --task ID and (send only)
--return-immediately and --data JSON (the message is one data part of that JSON
instead of text: a form filled in). --api-key KEY and --bearer TOKEN give credentials, which
the SDK's AuthInterceptor sends as the card's security schemes ask (`apiKey`,
`bearer`).

--otlp ENDPOINT traces the run with OpenTelemetry (``peer_tracing.py``): one
root span ``client_driver SCENARIO`` (service ``--service-name``, default
``python-client``) around the scenario, the httpx instrumentation's CLIENT spans
below it, which send ``traceparent`` on every request; each span is exported to
``ENDPOINT/v1/traces`` as it ends. The first output line is then
``{"traceId": "<32 hex digits>"}``, the root span's trace.

Output is ProtoJSON as the SDK serializes it (json_format.MessageToDict), one
JSON document per line: `card` prints the AgentCard, `send` a
SendMessageResponse ({"task": ...} or {"message": ...}), `stream` and
`subscribe` one StreamResponse per event, `get`/`cancel` a Task, `list` a
ListTasksResponse, `roundtrip` one {"step", "result"} object per step.

Exit codes: 0 ok; 1 roundtrip saw an unexpected result; 2 client-side failure
(network, card resolution, bad response); 3 the server answered an A2A or
JSON-RPC error. Errors are printed to stderr as `ERROR {"code", "message", ...}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
from a2a.client import A2ACardResolver, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth import AuthInterceptor, CredentialService
from a2a.client.errors import A2AClientError
from a2a.helpers import get_text_parts, new_data_message, new_text_message
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Role,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2A_ERROR_REASONS, JSON_RPC_ERROR_CODE_MAP, A2AError
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage

BINDINGS = {'jsonrpc': 'JSONRPC', 'rest': 'HTTP+JSON', 'grpc': 'GRPC'}
EXIT_UNEXPECTED, EXIT_CLIENT, EXIT_SERVER = 1, 2, 3
STEP_TIMEOUT_S = 10.0
SCENARIOS = ['card', 'send', 'stream', 'get', 'list', 'cancel', 'subscribe', 'roundtrip']


class Unexpected(Exception):
    """A roundtrip step observed something other than what it expected."""


def to_json(msg: ProtoMessage) -> dict[str, Any]:
    """The SDK's ProtoJSON form of a proto message."""
    result: dict[str, Any] = json_format.MessageToDict(msg)
    return result


def emit(doc: dict[str, Any]) -> None:
    """Prints one JSON document on one line."""
    print(json.dumps(doc, ensure_ascii=False), flush=True)


class StaticCredentials(CredentialService):
    """The same credential for every call, by security scheme name."""

    def __init__(self, by_scheme: dict[str, str]) -> None:
        self.by_scheme = by_scheme

    async def get_credentials(self, security_scheme_name: str,
                              context: ClientCallContext | None) -> str | None:
        return self.by_scheme.get(security_scheme_name)


def grpc_channel(url: str) -> grpc.aio.Channel:
    """The SDK's gRPC channel to an interface URL: grpcio takes `host:port`; `https` is TLS."""
    secure = url.startswith('https://')
    target = url.split('://', 1)[-1].rstrip('/')
    if secure:
        return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
    return grpc.aio.insecure_channel(target)


class Driver:
    """Holds the resolved card and one streaming and one blocking client."""

    def __init__(self, base_url: str, binding: str, credentials: dict[str, str] | None = None) -> None:
        self.base_url = base_url
        self.binding = BINDINGS[binding]
        self.card = AgentCard()
        self.clients: dict[bool, Client] = {}
        self.credentials = credentials or {}

    async def __aenter__(self) -> Driver:
        async with httpx.AsyncClient(headers={'A2A-Version': '1.0'}) as http:
            self.card = await A2ACardResolver(http, self.base_url).get_agent_card()
        for streaming in (False, True):
            config = ClientConfig(streaming=streaming, supported_protocol_bindings=[self.binding],
                                  grpc_channel_factory=grpc_channel)
            interceptors = [AuthInterceptor(StaticCredentials(self.credentials))] if self.credentials else []
            self.clients[streaming] = ClientFactory(config).create(self.card, interceptors)
        return self

    async def __aexit__(self, *_: object) -> None:
        for client in self.clients.values():
            await client.close()

    @staticmethod
    def request(text: str, task: Task | None = None, context_id: str | None = None,
                return_immediately: bool = False, task_id: str | None = None) -> SendMessageRequest:
        """A SendMessageRequest with one user text part."""
        message = new_text_message(text, task_id=task.id if task else task_id, role=Role.ROLE_USER,
                                   context_id=task.context_id if task else context_id)
        message.message_id = str(uuid.uuid4())
        req = SendMessageRequest(message=message)
        req.configuration.return_immediately = return_immediately
        return req

    async def send(self, req: SendMessageRequest) -> SendMessageResponse:
        """Blocking SendMessage; returns the task or message."""
        async for event in self.clients[False].send_message(req):
            return SendMessageResponse(task=event.task) if event.HasField('task') \
                else SendMessageResponse(message=event.message)
        raise A2AClientError('no response to SendMessage')

    def stream(self, req: SendMessageRequest) -> AsyncIterator[StreamResponse]:
        """SendStreamingMessage events."""
        return self.clients[True].send_message(req)

    def subscribe(self, task_id: str) -> AsyncIterator[StreamResponse]:
        """SubscribeToTask events."""
        return self.clients[True].subscribe(SubscribeToTaskRequest(id=task_id))

    async def get(self, task_id: str) -> Task:
        """GetTask."""
        return await self.clients[False].get_task(GetTaskRequest(id=task_id))

    async def cancel(self, task_id: str) -> Task:
        """CancelTask."""
        return await self.clients[False].cancel_task(CancelTaskRequest(id=task_id))

    async def list(self, req: ListTasksRequest) -> ListTasksResponse:
        """ListTasks."""
        return await self.clients[False].list_tasks(req)


def expect(cond: bool, what: str) -> None:
    """Raises Unexpected unless cond holds."""
    if not cond:
        raise Unexpected(what)


def state_name(task: Task) -> str:
    """The task's state as its enum name."""
    return str(TaskState.Name(task.status.state))


def artifact_texts(task: Task) -> list[str]:
    """All text parts of all artifacts of a task."""
    return [t for a in task.artifacts for t in get_text_parts(a.parts)]


async def roundtrip(d: Driver) -> None:
    """Runs the fixed scenario sequence, one output line per step."""
    ctx = str(uuid.uuid4())

    def step(name: str, result: Any) -> None:
        emit({'step': name, 'result': result})

    expect(any(i.protocol_binding == d.binding for i in d.card.supported_interfaces), 'card lacks binding')
    expect(d.card.capabilities.streaming, 'card lacks streaming capability')
    step('card', to_json(d.card))

    echo = (await d.send(d.request('echo hi', context_id=ctx))).task
    expect(state_name(echo) == 'TASK_STATE_COMPLETED', f'echo: {state_name(echo)}')
    expect(artifact_texts(echo) == ['hi'], f'echo artifacts: {artifact_texts(echo)}')
    step('send echo', to_json(echo))

    events = [e async for e in d.stream(d.request('stream 3', context_id=ctx))]
    updates = [e.artifact_update for e in events if e.HasField('artifact_update')]
    chunks = [' '.join(get_text_parts(u.artifact.parts)) for u in updates]
    expect(chunks == ['chunk 1', 'chunk 2', 'chunk 3'], f'stream chunks: {chunks}')
    expect(events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED, 'stream did not end COMPLETED')
    step('stream', [to_json(e) for e in events])

    waiting = (await d.send(d.request('wait', context_id=ctx, return_immediately=True))).task
    expect(state_name(waiting) in {'TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING'}, f'wait: {state_name(waiting)}')
    step('send wait', to_json(waiting))
    seen: list[StreamResponse] = []
    first = asyncio.Event()

    async def watch() -> None:
        async for event in d.subscribe(waiting.id):
            seen.append(event)
            first.set()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(first.wait(), STEP_TIMEOUT_S)
    canceled = await d.cancel(waiting.id)
    expect(state_name(canceled) == 'TASK_STATE_CANCELED', f'cancel: {state_name(canceled)}')
    step('cancel', to_json(canceled))
    await asyncio.wait_for(watcher, STEP_TIMEOUT_S)
    expect(seen[0].HasField('task') and seen[0].task.id == waiting.id, 'subscribe: first event is not the task')
    expect(seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED, 'subscribe: no CANCELED at the end')
    step('subscribe', [to_json(e) for e in seen])

    asked = (await d.send(d.request('ask', context_id=ctx))).task
    expect(state_name(asked) == 'TASK_STATE_INPUT_REQUIRED', f'ask: {state_name(asked)}')
    expect(get_text_parts(asked.status.message.parts) == ['need input'], 'ask: status message')
    step('send ask', to_json(asked))
    answered = (await d.send(d.request('more', task=asked))).task
    expect(answered.id == asked.id and state_name(answered) == 'TASK_STATE_COMPLETED', 'continue: not completed')
    expect(artifact_texts(answered) == ['got more'], f'continue artifacts: {artifact_texts(answered)}')
    step('continue ask', to_json(answered))

    reply = await d.send(d.request('message hi', context_id=ctx))
    expect(reply.HasField('message') and get_text_parts(reply.message.parts) == ['hi'], 'message: no reply')
    step('send message', to_json(reply.message))

    failed = (await d.send(d.request('fail', context_id=ctx))).task
    expect(state_name(failed) == 'TASK_STATE_FAILED', f'fail: {state_name(failed)}')
    expect(get_text_parts(failed.status.message.parts) == ['failed on purpose'], 'fail: status message')
    step('send fail', to_json(failed))

    listed = await d.list(ListTasksRequest(context_id=ctx))
    ids = {t.id for t in listed.tasks}
    expect(ids == {echo.id, waiting.id, asked.id, failed.id} | {e.task.id for e in events if e.HasField('task')},
           f'list ids: {sorted(ids)}')
    step('list', to_json(listed))

    got = await d.get(echo.id)
    expect(got.id == echo.id and artifact_texts(got) == ['hi'] and len(got.history) >= 1, 'get: mismatch')
    step('get', to_json(got))


def message_request(args: argparse.Namespace) -> SendMessageRequest:
    """The SendMessageRequest described by the command line."""
    if args.data is not None:
        message = new_data_message(json.loads(args.data), task_id=args.task, role=Role.ROLE_USER,
                                   context_id=args.context)
        message.message_id = str(uuid.uuid4())
        req = SendMessageRequest(message=message)
        req.configuration.return_immediately = args.return_immediately
        return req
    return Driver.request(' '.join(args.args), context_id=args.context, task_id=args.task,
                          return_immediately=args.return_immediately)


async def run(args: argparse.Namespace) -> None:
    """Dispatches one scenario."""
    credentials = {name: value for name, value in (('apiKey', args.api_key), ('bearer', args.bearer)) if value}
    async with Driver(args.url, args.binding, credentials) as d:
        match args.scenario:
            case 'card':
                emit(to_json(d.card))
            case 'send':
                emit(to_json(await d.send(message_request(args))))
            case 'stream':
                async for event in d.stream(message_request(args)):
                    emit(to_json(event))
            case 'subscribe':
                async for event in d.subscribe(args.args[0]):
                    emit(to_json(event))
            case 'get':
                emit(to_json(await d.get(args.args[0])))
            case 'cancel':
                emit(to_json(await d.cancel(args.args[0])))
            case 'list':
                req = ListTasksRequest(context_id=args.context or '', page_token=args.page_token or '')
                if args.page_size is not None:
                    req.page_size = args.page_size
                emit(to_json(await d.list(req)))
            case 'roundtrip':
                await roundtrip(d)


async def traced_run(args: argparse.Namespace) -> None:
    """`run`, inside a root span when --otlp is given."""
    if not args.otlp:
        await run(args)
        return
    from opentelemetry import trace
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    import peer_tracing

    provider = peer_tracing.configure(args.service_name, args.otlp)
    HTTPXClientInstrumentor().instrument()
    try:
        with trace.get_tracer('client_driver').start_as_current_span(f'client_driver {args.scenario}') as span:
            emit({'traceId': peer_tracing.trace_id_hex(span)})
            await run(args)
    finally:
        provider.shutdown()


def fail(code: int, error: dict[str, Any]) -> None:
    """Prints ERROR <json> to stderr and exits."""
    print(f'ERROR {json.dumps(error, ensure_ascii=False)}', file=sys.stderr, flush=True)
    sys.exit(code)


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--url', required=True, help='base URL serving /.well-known/agent-card.json')
    parser.add_argument('--binding', choices=sorted(BINDINGS), default='jsonrpc')
    parser.add_argument('--context', help='contextId for send/stream, filter for list')
    parser.add_argument('--task', help='taskId for send/stream (continue a task)')
    parser.add_argument('--return-immediately', action='store_true', help='send: do not wait for the task')
    parser.add_argument('--data', metavar='JSON', help='send: a data part of JSON instead of text')
    parser.add_argument('--page-size', type=int)
    parser.add_argument('--page-token')
    parser.add_argument('--api-key', help='the credential for the card\'s `apiKey` scheme')
    parser.add_argument('--bearer', help='the credential (a JWT) for the card\'s `bearer` scheme')
    parser.add_argument('--otlp', metavar='ENDPOINT', help='trace, exporting spans to ENDPOINT/v1/traces')
    parser.add_argument('--service-name', default='python-client', help='service.name of the spans (with --otlp)')
    parser.add_argument('scenario', choices=SCENARIOS)
    parser.add_argument('args', nargs='*')
    args = parser.parse_intermixed_args()
    given = args.args or (args.scenario == 'send' and args.data is not None)
    if args.scenario in {'send', 'stream', 'get', 'cancel', 'subscribe'} and not given:
        parser.error(f'{args.scenario} needs an argument')
    try:
        asyncio.run(traced_run(args))
    except (Unexpected, TimeoutError) as e:
        fail(EXIT_UNEXPECTED, {'code': None, 'message': f'unexpected result: {e!r}'})
    except A2AError as e:
        code = JSON_RPC_ERROR_CODE_MAP.get(type(e))
        error = {'code': code, 'reason': A2A_ERROR_REASONS.get(type(e)), 'type': type(e).__name__,
                 'message': e.message, 'data': e.data}
        fail(EXIT_CLIENT if code is None else EXIT_SERVER, error)


if __name__ == '__main__':
    main()
