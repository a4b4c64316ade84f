"""OpenTelemetry for the Python peers: spans exported over OTLP/HTTP as soon as they end.

Imported only when a peer is asked to trace (``--otlp``), so untraced peers never load
the SDK. The exporter reads the standard variables it knows on top of what is given
here (e.g. ``OTEL_EXPORTER_OTLP_COMPRESSION=gzip``).
"""

from __future__ import annotations

from opentelemetry import propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

EXPORT_TIMEOUT_S = 5.0


def configure(service_name: str, endpoint: str) -> TracerProvider:
    """Installs a global tracer provider exporting to ``<endpoint>/v1/traces``, and the W3C
    propagators (traceparent/tracestate and baggage). Returns the provider, to shut it down."""
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    exporter = OTLPSpanExporter(endpoint=f'{endpoint.rstrip("/")}/v1/traces', timeout=EXPORT_TIMEOUT_S)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    propagate.set_global_textmap(CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()]))
    return provider


def trace_id_hex(span: trace.Span) -> str:
    """The span's trace id as 32 lowercase hex digits."""
    return trace.format_trace_id(span.get_span_context().trace_id)
