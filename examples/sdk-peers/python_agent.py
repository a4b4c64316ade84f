"""A small a2a-sdk (Python) agent with one skill, `reverse`: it answers with the text reversed.

Run:  python python_agent.py [--port PORT]   (or PYTHON_AGENT_PORT; default 9101; 0 picks a free one)
Prints one line ``READY <base_url>`` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

import uvicorn
from a2a.helpers import get_text_parts, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette


class ReverseExecutor(AgentExecutor):
    """Answers every message with an artifact holding its text reversed."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        text = ' '.join(get_text_parts(context.message.parts))
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.add_artifact([new_text_part(text[::-1])], name='reversed')
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(base_url: str) -> AgentCard:
    """One skill, `reverse`: Mew addresses it as `<peer>/reverse`."""
    return AgentCard(
        name='Reverser',
        description='Reverses text (a2a-sdk Python example)',
        version='1.0.0',
        supported_interfaces=[AgentInterface(url=f'{base_url}/', protocol_binding='JSONRPC', protocol_version='1.0')],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[
            AgentSkill(
                id='reverse',
                name='Reverse',
                description='Answers with the text of the message reversed.',
                tags=['text'],
                examples=['hello world'],
            )
        ],
    )


async def serve(host: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    base_url = f'http://{host}:{sock.getsockname()[1]}'
    handler = DefaultRequestHandler(
        agent_executor=ReverseExecutor(), task_store=InMemoryTaskStore(), agent_card=card(base_url)
    )
    app = Starlette(routes=[*create_agent_card_routes(card(base_url)), *create_jsonrpc_routes(handler, rpc_url='/')])
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, log_level='warning'))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.01)
    if server.started:
        print(f'READY {base_url}', flush=True)
    await serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=int(os.environ.get('PYTHON_AGENT_PORT', '9101')))
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port))


if __name__ == '__main__':
    main()
