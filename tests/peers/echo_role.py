"""The echo agent as a Mew command role: the scripts of echo_server.py over Mew's stdin/stdout protocol.

Run by a role file with `input: message`: stdin holds one JSON line
``{"message": <Message>, "history": [<Message>, ...]}``; each stdout line is
one A2A StreamResponse object (see examples/wrap-cli/README.md). Standard
library only.

Commands (first text part of the message):
  echo <text>     artifact "echo" with <text>
  stream <n>      n chunks "chunk <i>" of one artifact "stream" (append after
                  the first, lastChunk on the last)
  ask [<s>]       INPUT_REQUIRED "need input", then exit (after <s> seconds more,
                  like a program that tidies up after asking); the resumed turn
                  (MEW_RESUMED=1) answers with artifact "got <t>", t the reply's text
  wait            runs until killed (or until the node that started it is gone)
  fail            "failed on purpose" on stderr, exit status 1
  message <text>  a direct agent message with <text>
  history         artifact "history" with "history <n>", n the number of
                  earlier messages of the conversation, and a data part listing
                  them as {"role", "text"}
  anything else   like "echo <whole text>"
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import uuid
from typing import Any

COMMANDS = {'echo', 'stream', 'ask', 'wait', 'fail', 'message', 'history'}


def emit(event: dict[str, Any]) -> None:
    """Prints one StreamResponse line."""
    print(json.dumps(event), flush=True)


def texts(message: dict[str, Any]) -> list[str]:
    """The text parts of a message."""
    return [part['text'] for part in message.get('parts', []) if 'text' in part]


def artifact(name: str, parts: list[dict[str, Any]], artifact_id: str = '', append: bool = False,
             last_chunk: bool = True) -> None:
    """Prints an artifactUpdate."""
    body: dict[str, Any] = {'name': name, 'parts': parts}
    if artifact_id:
        body['artifactId'] = artifact_id
    update: dict[str, Any] = {'artifact': body}
    if append:
        update['append'] = True
    if last_chunk:
        update['lastChunk'] = True
    emit({'artifactUpdate': update})


def agent_message(text: str) -> dict[str, Any]:
    """An agent message with one text part."""
    return {'messageId': str(uuid.uuid4()), 'role': 'ROLE_AGENT', 'parts': [{'text': text}]}


def wait_forever() -> None:
    """Blocks until killed, or until nobody reads stdout any more: a node killed with SIGKILL
    cannot stop its command's process group, and this program must not outlive it."""
    poller = select.poll()
    poller.register(sys.stdout.fileno(), 0)  # only POLLERR/POLLHUP: the reader is gone
    poller.poll()


def main() -> int:
    """Reads the input line and plays the script its message names."""
    request = json.loads(sys.stdin.readline())
    message, history = request['message'], request.get('history', [])
    parts = texts(message)
    text = parts[0] if parts else ''
    if os.environ.get('MEW_RESUMED') == '1':
        artifact('echo', [{'text': f'got {text}'}])
        return 0
    head, _, rest = text.strip().partition(' ')
    command, arg = (head, rest) if head in COMMANDS else ('echo', text)
    if command == 'stream':
        count = int(arg or '1')
        artifact_id = str(uuid.uuid4())
        for i in range(1, count + 1):
            artifact('stream', [{'text': f'chunk {i}'}], artifact_id, append=i > 1, last_chunk=i == count)
    elif command == 'ask':
        emit({'statusUpdate': {'status': {'state': 'TASK_STATE_INPUT_REQUIRED',
                                          'message': agent_message('need input')}}})
        time.sleep(float(arg or 0))
    elif command == 'wait':
        wait_forever()
    elif command == 'fail':
        print('failed on purpose', file=sys.stderr, flush=True)
        return 1
    elif command == 'message':
        emit({'message': agent_message(arg)})
    elif command == 'history':
        earlier = [{'role': m.get('role', ''), 'text': '\n'.join(texts(m))} for m in history]
        artifact('history', [{'text': f'history {len(history)}'}, {'data': {'messages': earlier}}])
    else:
        artifact('echo', [{'text': arg}])
    return 0


if __name__ == '__main__':
    sys.exit(main())
