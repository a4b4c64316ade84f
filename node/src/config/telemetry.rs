//! The `telemetry:` section: where the node's traces go and whose trace context it continues.
//!
//! ```yaml
//! telemetry:
//!   endpoint: http://collector:4318   # OTLP/HTTP; unset: OTEL_EXPORTER_OTLP_ENDPOINT, else off
//!   service_name: mew-eu              # unless OTEL_SERVICE_NAME; unset: node.name
//!   inbound: all                      # all | authenticated | none: whose traceparent is continued
//!   capture_content: false            # prompts and completions on model spans
//!   metrics: true                     # metrics over OTLP too (beside /metrics)
//! ```
//!
//! The standard variables (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG`, `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SDK_DISABLED`) are read by the OpenTelemetry SDK itself.

use serde::{Deserialize, Serialize};

use super::LoadedConfig;
use super::schema::http_url;
use crate::telemetry::{Inbound, TelemetryConfig};

impl LoadedConfig {
    pub(super) fn resolve_telemetry(&self) -> TelemetryConfig {
        let settings = &self.settings.telemetry;
        TelemetryConfig {
            endpoint: settings.endpoint.clone(),
            service_name: settings.service_name.clone(),
            inbound: settings.inbound,
            capture_content: settings.capture_content,
            metrics: settings.metrics,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct TelemetrySettings {
    #[serde(deserialize_with = "http_url")]
    pub(crate) endpoint: Option<String>,
    pub(crate) service_name: Option<String>,
    pub(crate) inbound: Inbound,
    pub(crate) capture_content: bool,
    pub(crate) metrics: bool,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            endpoint: None,
            service_name: None,
            inbound: Inbound::default(),
            capture_content: false,
            metrics: true,
        }
    }
}
