"""Writes A2A 1.0 wire samples emitted by the a2a-sdk to cards/tests/samples/.

Proto samples are built from the SDK's protobuf types with fixed ids and
serialized with json_format.MessageToJson (what the SDK puts on the wire).
agent_card.json and the *_error_* samples are captured from a live
echo_server.py. Run: python make_samples.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import httpx
from a2a.helpers import new_text_part
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import serialize_list_tasks_response
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    APIKeySecurityScheme,
    Artifact,
    AuthenticationInfo,
    AuthorizationCodeOAuthFlow,
    CancelTaskRequest,
    ClientCredentialsOAuthFlow,
    DeviceCodeOAuthFlow,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ImplicitOAuthFlow,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    MutualTlsSecurityScheme,
    OAuth2SecurityScheme,
    OAuthFlows,
    OpenIdConnectSecurityScheme,
    Part,
    PasswordOAuthFlow,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageConfiguration,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.signing import ProtectedHeader, create_agent_card_signer, create_signature_verifier
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.struct_pb2 import Value
from google.protobuf.timestamp_pb2 import Timestamp
from jwt import PyJWK
from jwt.algorithms import OKPAlgorithm

from echo_server import build_card

HERE = Path(__file__).parent
SAMPLES = HERE.parent.parent / 'cards' / 'tests' / 'samples'
BASE = 'https://agent.example.com'
TASK_ID, CONTEXT_ID = 'task-0001', 'ctx-0001'
SIGNING_SEED = bytes(range(32))  # fixed Ed25519 key: signatures are reproducible


def write(name: str, doc: ProtoMessage | dict[str, Any]) -> None:
    """Writes one pretty JSON document; keys sorted since map and Struct order varies per run."""
    if isinstance(doc, ProtoMessage):
        text = json_format.MessageToJson(doc, indent=2, sort_keys=True)
    else:
        text = json.dumps(doc, indent=2, sort_keys=True)
    (SAMPLES / name).write_text(text + '\n', encoding='utf-8')


def ts(value: str) -> Timestamp:
    """Parses an RFC 3339 timestamp."""
    stamp = Timestamp()
    stamp.FromJsonString(value)
    return stamp


def text_message(role: Role, text: str, message_id: str) -> Message:
    """A one-text-part message inside the sample task."""
    return Message(message_id=message_id, context_id=CONTEXT_ID, task_id=TASK_ID, role=role,
                   parts=[new_text_part(text)])


def user_message() -> Message:
    """A user message with every part kind and optional field."""
    data = Value()
    json_format.ParseDict({'city': 'Paris', 'days': 3, 'tags': ['a', 'b'], 'ok': True, 'none': None}, data)
    message = Message(
        message_id='msg-user-1', context_id=CONTEXT_ID, task_id=TASK_ID, role=Role.ROLE_USER,
        parts=[
            Part(text='hello', media_type='text/plain'),
            Part(raw=b'\x00\x01\x02binary\xff', filename='blob.bin', media_type='application/octet-stream'),
            Part(url='https://files.example.com/report.pdf', filename='report.pdf', media_type='application/pdf'),
            Part(data=data, media_type='application/json'),
        ],
        extensions=['https://example.com/ext/trace/v1'],
        reference_task_ids=['task-0000'],
    )
    message.parts[0].metadata.update({'lang': 'en'})
    message.metadata.update({'source': 'sample'})
    return message


def completed_task() -> Task:
    """A completed task with history and artifacts."""
    task = Task(
        id=TASK_ID, context_id=CONTEXT_ID,
        status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED, timestamp=ts('2025-06-01T12:00:05.250Z')),
        artifacts=[Artifact(artifact_id='art-1', name='echo', description='echoed text',
                            parts=[new_text_part('hi')], extensions=['https://example.com/ext/trace/v1'])],
        history=[text_message(Role.ROLE_USER, 'echo hi', 'msg-1'), text_message(Role.ROLE_AGENT, 'done', 'msg-2')],
    )
    task.artifacts[0].metadata.update({'chunks': 1})
    task.metadata.update({'priority': 'low'})
    return task


def input_required_task() -> Task:
    """A task waiting for user input."""
    return Task(
        id=TASK_ID, context_id=CONTEXT_ID,
        status=TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED,
                          message=text_message(Role.ROLE_AGENT, 'need input', 'msg-3'),
                          timestamp=ts('2025-06-01T12:00:01Z')),
        history=[text_message(Role.ROLE_USER, 'ask', 'msg-1')],
    )


def push_config() -> TaskPushNotificationConfig:
    """A push notification config with authentication."""
    return TaskPushNotificationConfig(
        id='push-1', task_id=TASK_ID, url='https://hooks.example.com/a2a', token='opaque-token',
        authentication=AuthenticationInfo(scheme='Bearer', credentials='secret-credentials'),
    )


def full_card() -> AgentCard:
    """An agent card using every optional field, signed by the SDK signer."""
    scopes = {'tasks:read': 'Read tasks', 'tasks:write': 'Write tasks'}
    card = AgentCard(
        name='Full Sample Agent', description='Uses every AgentCard field.', version='2.1.0',
        supported_interfaces=[
            AgentInterface(url=f'{BASE}/a2a/jsonrpc', protocol_binding='JSONRPC', protocol_version='1.0'),
            AgentInterface(url=f'{BASE}/a2a/rest', protocol_binding='HTTP+JSON', protocol_version='1.0',
                           tenant='acme'),
        ],
        provider=AgentProvider(organization='Example Org', url='https://example.com'),
        documentation_url=f'{BASE}/docs', icon_url=f'{BASE}/icon.png',
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=True, extended_agent_card=True,
            extensions=[AgentExtension(uri='https://example.com/ext/trace/v1', description='Tracing',
                                       required=False)]),
        security_schemes={
            'apiKey': SecurityScheme(api_key_security_scheme=APIKeySecurityScheme(
                description='API key in a header', location='header', name='X-API-Key')),
            'bearer': SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
                description='JWT bearer', scheme='Bearer', bearer_format='JWT')),
            'oauthCode': SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(
                description='Authorization code', oauth2_metadata_url=f'{BASE}/.well-known/oauth-authorization-server',
                flows=OAuthFlows(authorization_code=AuthorizationCodeOAuthFlow(
                    authorization_url=f'{BASE}/authorize', token_url=f'{BASE}/token',
                    refresh_url=f'{BASE}/refresh', scopes=scopes, pkce_required=True)))),
            'oauthClient': SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(flows=OAuthFlows(
                client_credentials=ClientCredentialsOAuthFlow(token_url=f'{BASE}/token', scopes=scopes)))),
            'oauthImplicit': SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(flows=OAuthFlows(
                implicit=ImplicitOAuthFlow(authorization_url=f'{BASE}/authorize', scopes=scopes)))),
            'oauthPassword': SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(flows=OAuthFlows(
                password=PasswordOAuthFlow(token_url=f'{BASE}/token', scopes=scopes)))),
            'oauthDevice': SecurityScheme(oauth2_security_scheme=OAuth2SecurityScheme(flows=OAuthFlows(
                device_code=DeviceCodeOAuthFlow(device_authorization_url=f'{BASE}/device',
                                                token_url=f'{BASE}/token', scopes=scopes)))),
            'oidc': SecurityScheme(open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                description='OpenID Connect', open_id_connect_url=f'{BASE}/.well-known/openid-configuration')),
            'mtls': SecurityScheme(mtls_security_scheme=MutualTlsSecurityScheme(description='Client certs')),
        },
        security_requirements=[
            SecurityRequirement(schemes={'oauthCode': StringList(list=['tasks:read', 'tasks:write'])}),
            SecurityRequirement(schemes={'apiKey': StringList(), 'mtls': StringList()}),
        ],
        default_input_modes=['text/plain', 'application/json'],
        default_output_modes=['text/plain'],
        skills=[AgentSkill(
            id='summarize', name='Summarize', description='Summarizes documents.', tags=['text', 'summary'],
            examples=['Summarize this PDF'], input_modes=['application/pdf', 'text/plain'],
            output_modes=['text/markdown'],
            security_requirements=[SecurityRequirement(schemes={'bearer': StringList()})])],
    )
    card.capabilities.extensions[0].params.update({'level': 'debug'})
    key = PyJWK(json.loads(OKPAlgorithm.to_jwk(Ed25519PrivateKey.from_private_bytes(SIGNING_SEED))))
    protected = cast(ProtectedHeader, {'kid': 'sample-key-1', 'alg': 'EdDSA', 'typ': 'JOSE'})
    signer = create_agent_card_signer(key, protected, header={'note': 'unprotected header'})
    return signer(card)


def public_jwk() -> dict[str, Any]:
    """The public JWK matching SIGNING_SEED, for verifying agent_card_full.json."""
    jwk: dict[str, Any] = json.loads(OKPAlgorithm.to_jwk(Ed25519PrivateKey.from_private_bytes(SIGNING_SEED)
                                                         .public_key()))
    return {**jwk, 'kid': 'sample-key-1', 'alg': 'EdDSA'}


def write_proto_samples() -> None:
    """Writes every sample that needs no server."""
    task = completed_task()
    card = full_card()
    verify = create_signature_verifier(lambda _kid, _jku: PyJWK(public_jwk()), ['EdDSA'])
    verify(card)
    write('agent_card_full.json', card)
    write('agent_card_full.public_jwk.json', public_jwk())
    write('task_completed.json', task)
    write('task_input_required.json', input_required_task())
    write('message_user.json', user_message())
    write('stream_status_update.json', StreamResponse(status_update=TaskStatusUpdateEvent(
        task_id=TASK_ID, context_id=CONTEXT_ID,
        status=TaskStatus(state=TaskState.TASK_STATE_WORKING, timestamp=ts('2025-06-01T12:00:00.5Z')))))
    write('stream_artifact_update.json', StreamResponse(artifact_update=TaskArtifactUpdateEvent(
        task_id=TASK_ID, context_id=CONTEXT_ID, append=True, last_chunk=True,
        artifact=Artifact(artifact_id='art-1', name='stream', parts=[new_text_part('chunk 2')]))))
    write('stream_task.json', StreamResponse(task=input_required_task()))
    write('stream_message.json', StreamResponse(message=text_message(Role.ROLE_AGENT, 'hi', 'msg-9')))
    write('send_message_request.json', SendMessageRequest(
        message=user_message(),
        configuration=SendMessageConfiguration(accepted_output_modes=['text/plain', 'application/json'],
                                               history_length=5, return_immediately=True,
                                               task_push_notification_config=push_config())))
    write('send_message_response_task.json', SendMessageResponse(task=task))
    write('send_message_response_message.json', SendMessageResponse(
        message=Message(message_id='msg-9', context_id=CONTEXT_ID, role=Role.ROLE_AGENT,
                        parts=[new_text_part('hi')])))
    write('list_tasks_request.json', ListTasksRequest(
        context_id=CONTEXT_ID, status=TaskState.TASK_STATE_COMPLETED, page_size=10, page_token='cursor-1',
        history_length=2, status_timestamp_after=ts('2025-06-01T00:00:00Z'), include_artifacts=True))
    write('list_tasks_response.json', serialize_list_tasks_response(
        ListTasksResponse(tasks=[task], next_page_token='cursor-2', page_size=10, total_size=11), True))
    write('get_task_request.json', GetTaskRequest(id=TASK_ID, history_length=3))
    cancel = CancelTaskRequest(id=TASK_ID)
    cancel.metadata.update({'reason': 'user request'})
    write('cancel_task_request.json', cancel)
    write('subscribe_request.json', SubscribeToTaskRequest(id=TASK_ID))
    write('push_config.json', push_config())


def write_live_samples() -> None:
    """Starts echo_server.py and captures its card and TaskNotFound errors."""
    server = subprocess.Popen([sys.executable, str(HERE / 'echo_server.py'), '--port', '0'],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[1]
        with httpx.Client(base_url=url, headers={'A2A-Version': '1.0'}) as http:
            card = http.get('/.well-known/agent-card.json').json()
            grpc_url = next(i['url'] for i in card['supportedInterfaces'] if i['protocolBinding'] == 'GRPC')
            assert card == agent_card_to_dict(build_card(url, grpc_url)), 'served card differs from agent_card_to_dict'
            write('agent_card.json', agent_card_to_dict(build_card('http://127.0.0.1:8000')))
            rpc = {'jsonrpc': '2.0', 'id': 1, 'method': 'GetTask', 'params': {'id': 'no-such-task'}}
            write('jsonrpc_error_task_not_found.json', http.post('/', json=rpc).json())
            rest = http.get('/tasks/no-such-task')
            write('rest_error_task_not_found.json', rest.json())
            (SAMPLES / 'rest_error_task_not_found.status').write_text(f'{rest.status_code}\n')
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    """Writes all samples."""
    SAMPLES.mkdir(parents=True, exist_ok=True)
    write_proto_samples()
    write_live_samples()
    print(f'wrote {len(list(SAMPLES.iterdir()))} files to {SAMPLES.relative_to(HERE.parent.parent)}')


if __name__ == '__main__':
    main()
