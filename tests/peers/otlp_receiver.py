"""OTLP/HTTP trace and metrics receiver for tests, decoding with the official protobuf definitions.

Binds a loopback port and prints exactly one line ``READY <base_url>`` to stdout
once it accepts connections; ``<base_url>`` is what OTEL_EXPORTER_OTLP_ENDPOINT
takes (exporters append ``/v1/traces`` and ``/v1/metrics``).

Endpoints:
  POST /v1/traces   an ExportTraceServiceRequest, ``application/x-protobuf`` or
                    ``application/json`` (OTLP/JSON: hex ids, enums as numbers
                    or names), optionally ``Content-Encoding: gzip``. Answers 200
                    with an empty ExportTraceServiceResponse in the request's
                    encoding; an undecodable body gets 400 with a google.rpc.Status,
                    an unknown content type or encoding 415.
  POST /v1/metrics  an ExportMetricsServiceRequest, encoded and answered the same way.
  GET /spans        every span kept, oldest first, as a JSON array of flat records
                    (``?trace_id=HEX`` keeps one trace); see ``flatten_span``.
  DELETE /spans     forgets every span (the counters stay).
  GET /metrics      every metric data point kept, oldest first, as a JSON array of
                    flat records (``?name=NAME`` keeps one metric); see ``flatten_point``.
  GET /stats        counters: trace exports received, accepted, refused, any gzip-encoded,
                    spans kept, metric exports received and data points kept.

Switches for tests of a bad collector: ``--fail-with STATUS`` answers every export
with STATUS (and keeps nothing); ``--delay-ms N`` waits N ms before answering each
export (its spans are kept once the wait is over).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import sys
import threading
import time
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, status_pb2
from google.protobuf.message import Message
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

PROTOBUF = 'application/x-protobuf'
JSON = 'application/json'
MAX_BODY = 64 * 1024 * 1024
# The id fields of OTLP/JSON, which carry hex where ProtoJSON would carry base64.
ID_FIELDS = {'traceId', 'spanId', 'parentSpanId', 'trace_id', 'span_id', 'parent_span_id'}


class BadRequest(Exception):
    """The export cannot be decoded: answered 400."""


class Unsupported(Exception):
    """The content type or encoding is not one OTLP/HTTP defines: answered 415."""


def any_value(value: AnyValue) -> Any:
    """An AnyValue as plain JSON: arrays as lists, kvlists as objects, bytes as hex."""
    match value.WhichOneof('value'):
        case 'string_value':
            return value.string_value
        case 'bool_value':
            return value.bool_value
        case 'int_value':
            return value.int_value
        case 'double_value':
            return value.double_value
        case 'array_value':
            return [any_value(v) for v in value.array_value.values]
        case 'kvlist_value':
            return attributes(value.kvlist_value.values)
        case 'bytes_value':
            return value.bytes_value.hex()
        case _:
            return None


def attributes(pairs: list[KeyValue]) -> dict[str, Any]:
    """KeyValues as one JSON object (a repeated key keeps its last value)."""
    return {kv.key: any_value(kv.value) for kv in pairs}


def flatten_span(span: Span, resource: dict[str, Any], scope_name: str, scope_version: str) -> dict[str, Any]:
    """One span as a flat record: ids in lowercase hex, enums by their proto names."""
    return {
        'trace_id': span.trace_id.hex(),
        'span_id': span.span_id.hex(),
        'parent_span_id': span.parent_span_id.hex() or None,
        'trace_state': span.trace_state,
        'flags': span.flags,
        'name': span.name,
        'kind': Span.SpanKind.Name(span.kind),
        'start_time_unix_nano': span.start_time_unix_nano,
        'end_time_unix_nano': span.end_time_unix_nano,
        'status': {'code': Status.StatusCode.Name(span.status.code), 'message': span.status.message},
        'attributes': attributes(span.attributes),
        'events': [
            {'name': e.name, 'time_unix_nano': e.time_unix_nano, 'attributes': attributes(e.attributes)}
            for e in span.events
        ],
        'links': [
            {
                'trace_id': link.trace_id.hex(),
                'span_id': link.span_id.hex(),
                'trace_state': link.trace_state,
                'attributes': attributes(link.attributes),
            }
            for link in span.links
        ],
        'service': resource.get('service.name'),
        'resource': resource,
        'scope': scope_name,
        'scope_version': scope_version,
    }


def flatten(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """Every span of an export, each with its resource and scope."""
    out = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            out.extend(flatten_span(s, resource, scope.name, scope.version) for s in scope_spans.spans)
    return out


def number(point: Any) -> int | float | None:
    """The value of a NumberDataPoint: an int or a double."""
    match point.WhichOneof('value'):
        case 'as_int':
            return point.as_int
        case 'as_double':
            return point.as_double
        case _:
            return None


def flatten_point(metric: Metric, point: Any, kind: str, resource: dict[str, Any], scope: str) -> dict[str, Any]:
    """One data point as a flat record: its metric's name, unit, kind and its values."""
    record = {
        'name': metric.name,
        'description': metric.description,
        'unit': metric.unit,
        'kind': kind,
        'attributes': attributes(point.attributes),
        'start_time_unix_nano': point.start_time_unix_nano,
        'time_unix_nano': point.time_unix_nano,
        'service': resource.get('service.name'),
        'resource': resource,
        'scope': scope,
    }
    if kind == 'histogram':
        record.update(
            count=point.count,
            sum=point.sum if point.HasField('sum') else None,
            bucket_counts=list(point.bucket_counts),
            explicit_bounds=list(point.explicit_bounds),
        )
    else:
        record['value'] = number(point)
    if kind in ('sum', 'histogram'):
        data = metric.sum if kind == 'sum' else metric.histogram
        record['temporality'] = AggregationTemporality.Name(data.aggregation_temporality)
        if kind == 'sum':
            record['monotonic'] = data.is_monotonic
    return record


def flatten_metrics(request: ExportMetricsServiceRequest) -> list[dict[str, Any]]:
    """Every data point of an export (gauges, sums and histograms), with its resource and scope."""
    out = []
    for resource_metrics in request.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            scope = scope_metrics.scope.name
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof('data')
                if kind not in ('gauge', 'sum', 'histogram'):
                    continue
                points = getattr(metric, kind).data_points
                out.extend(flatten_point(metric, p, kind, resource, scope) for p in points)
    return out


def hex_ids_to_base64(node: Any) -> Any:
    """Rewrites OTLP/JSON's hex ids into the base64 that ProtoJSON parsing expects."""
    if isinstance(node, list):
        return [hex_ids_to_base64(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ID_FIELDS and isinstance(value, str):
            try:
                value = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError as e:
                raise BadRequest(f'{key} is not hex: {value!r}') from e
        out[key] = hex_ids_to_base64(value)
    return out


def decode(body: bytes, content_type: str, encoding: str, request: Message) -> Message:
    """The export in `body`, decompressed and parsed into `request`."""
    match encoding:
        case '' | 'identity':
            pass
        case 'gzip':
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError, zlib.error) as e:
                raise BadRequest(f'bad gzip body: {e}') from e
        case _:
            raise Unsupported(f'unsupported Content-Encoding {encoding!r}')
    if content_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            raise BadRequest(f'bad protobuf body: {e}') from e
    elif content_type == JSON:
        try:
            json_format.ParseDict(hex_ids_to_base64(json.loads(body)), request, ignore_unknown_fields=True)
        except (ValueError, json_format.ParseError) as e:
            raise BadRequest(f'bad JSON body: {e}') from e
    else:
        raise Unsupported(f'unsupported Content-Type {content_type!r}: use {PROTOBUF} or {JSON}')
    return request


class Store:
    """The spans received and the export counters, shared by the request threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[dict[str, Any]] = []
        self.points: list[dict[str, Any]] = []
        self.stats = {'exports': 0, 'accepted': 0, 'refused': 0, 'gzip': 0, 'metric_exports': 0}

    def count(self, key: str) -> None:
        """Adds one to a counter."""
        with self.lock:
            self.stats[key] += 1

    def add(self, spans: list[dict[str, Any]]) -> None:
        """Keeps the spans of one accepted export."""
        with self.lock:
            self.spans.extend(spans)
            self.stats['accepted'] += 1

    def add_points(self, points: list[dict[str, Any]]) -> None:
        """Keeps the data points of one accepted metrics export."""
        with self.lock:
            self.points.extend(points)

    def metric_points(self, name: str | None) -> list[dict[str, Any]]:
        """The data points kept, optionally of one metric."""
        with self.lock:
            return [p for p in self.points if name is None or p['name'] == name]

    def snapshot(self, trace_id: str | None) -> list[dict[str, Any]]:
        """The spans kept, optionally of one trace."""
        with self.lock:
            return [s for s in self.spans if trace_id is None or s['trace_id'] == trace_id]

    def counters(self) -> dict[str, int]:
        """The counters and the number of spans kept."""
        with self.lock:
            return {**self.stats, 'spans': len(self.spans), 'points': len(self.points)}

    def clear(self) -> None:
        """Forgets every span."""
        with self.lock:
            self.spans.clear()


class Handler(BaseHTTPRequestHandler):
    """The receiver's endpoints; the server carries the store and the switches."""

    protocol_version = 'HTTP/1.1'
    server: Receiver

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        """Quiet: tests read stdout, and stderr stays for errors."""

    def reply(self, status: int, body: bytes, content_type: str) -> None:
        """Sends a complete response with a length, so connections are kept alive."""
        self.send_response(status)
        self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply_json(self, status: int, doc: Any) -> None:
        """Sends `doc` as JSON."""
        self.reply(status, json.dumps(doc).encode(), JSON)

    def read_body(self) -> bytes:
        """The request body, by Content-Length or chunked."""
        if 'chunked' in self.headers.get('Transfer-Encoding', '').lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b';')[0].strip() or b'0', 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return b''.join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
                if sum(map(len, chunks)) > MAX_BODY:
                    raise BadRequest('body too large')
        length = int(self.headers.get('Content-Length') or 0)
        if length > MAX_BODY:
            raise BadRequest('body too large')
        return self.rfile.read(length)

    def do_POST(self) -> None:
        """POST /v1/traces, POST /v1/metrics."""
        path = urlsplit(self.path).path
        if path not in ('/v1/traces', '/v1/metrics'):
            self.reply_json(HTTPStatus.NOT_FOUND, {'error': f'no such endpoint: POST {self.path}'})
            return
        traces = path == '/v1/traces'
        store = self.server.store
        store.count('exports' if traces else 'metric_exports')
        content_type = self.headers.get('Content-Type', '').split(';')[0].strip().lower()
        encoding = self.headers.get('Content-Encoding', '').strip().lower()
        if encoding == 'gzip':
            store.count('gzip')
        try:
            body = self.read_body()
        except (ValueError, BadRequest) as e:
            self.refuse(HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT, str(e), content_type, traces)
            self.close_connection = True
            return
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        if self.server.fail_with:
            self.refuse(self.server.fail_with, code_pb2.UNAVAILABLE, 'failing on purpose', content_type, traces)
            return
        try:
            request = decode(
                body, content_type, encoding, ExportTraceServiceRequest() if traces else ExportMetricsServiceRequest()
            )
        except BadRequest as e:
            self.refuse(HTTPStatus.BAD_REQUEST, code_pb2.INVALID_ARGUMENT, str(e), content_type, traces)
            return
        except Unsupported as e:
            self.refuse(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, code_pb2.INVALID_ARGUMENT, str(e), content_type, traces)
            return
        if traces:
            store.add(flatten(request))
            response: Message = ExportTraceServiceResponse()
        else:
            store.add_points(flatten_metrics(request))
            response = ExportMetricsServiceResponse()
        if content_type == JSON:
            self.reply(HTTPStatus.OK, json_format.MessageToJson(response).encode(), JSON)
        else:
            self.reply(HTTPStatus.OK, response.SerializeToString(), PROTOBUF)

    def refuse(self, status: int, code: int, message: str, content_type: str, traces: bool) -> None:
        """A refused export: a google.rpc.Status, as the OTLP/HTTP spec says (a trace export's
        refusal is counted)."""
        if traces:
            self.server.store.count('refused')
        body = status_pb2.Status(code=code, message=message)
        if content_type == JSON:
            self.reply(status, json_format.MessageToJson(body).encode(), JSON)
        else:
            self.reply(status, body.SerializeToString(), PROTOBUF)

    def do_GET(self) -> None:
        """GET /spans, GET /metrics, GET /stats."""
        url = urlsplit(self.path)
        if url.path == '/spans':
            trace_id = parse_qs(url.query).get('trace_id', [None])[0]
            self.reply_json(HTTPStatus.OK, self.server.store.snapshot(trace_id and trace_id.lower()))
        elif url.path == '/metrics':
            name = parse_qs(url.query).get('name', [None])[0]
            self.reply_json(HTTPStatus.OK, self.server.store.metric_points(name))
        elif url.path == '/stats':
            self.reply_json(HTTPStatus.OK, self.server.store.counters())
        else:
            self.reply_json(HTTPStatus.NOT_FOUND, {'error': f'no such endpoint: GET {self.path}'})

    def do_DELETE(self) -> None:
        """DELETE /spans."""
        if urlsplit(self.path).path == '/spans':
            self.server.store.clear()
            self.reply_json(HTTPStatus.OK, {})
        else:
            self.reply_json(HTTPStatus.NOT_FOUND, {'error': f'no such endpoint: DELETE {self.path}'})


class Receiver(ThreadingHTTPServer):
    """The HTTP server, one thread per connection."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], fail_with: int | None, delay_s: float) -> None:
        super().__init__(address, Handler)
        self.store = Store()
        self.fail_with = fail_with
        self.delay_s = delay_s


def main() -> None:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0, help='0 picks a free port')
    parser.add_argument('--fail-with', type=int, metavar='STATUS', help='answer every export with this status')
    parser.add_argument('--delay-ms', type=int, default=0, metavar='N', help='wait N ms before answering an export')
    args = parser.parse_args()
    if args.fail_with is not None and not 400 <= args.fail_with <= 599:
        parser.error('--fail-with takes an HTTP error status (400-599)')
    server = Receiver((args.host, args.port), args.fail_with, args.delay_ms / 1000)
    print(f'READY http://{args.host}:{server.server_address[1]}', flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == '__main__':
    main()
