//! OTLP export of the runs' and calls' spans (`OTEL_EXPORTER_OTLP_ENDPOINT`): each
//! `exec.finished` and `tool_call.finished` event becomes a finished span with the ids the
//! event carries (`trace`), sent by the OpenTelemetry SDK's batch processor and the
//! `opentelemetry-otlp` exporter as OTLP/HTTP JSON to `{endpoint}/v1/traces`.
//!
//! Owns turning events into spans and the exporter's lifetime. It must never hold up a run:
//! spans go to the SDK's bounded queue (full: dropped by the SDK), exported on its own thread.
//! The exporter's HTTP client is ours ([`TokioClient`]): the SDK's thread hands each request
//! to the sidecar's runtime, so one reqwest serves the whole process.

use crate::events::{Event, Observer};
use async_trait::async_trait;
use axum::body::Bytes;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use std::time::{Duration, UNIX_EPOCH};

/// How long spans wait in the batch before they are sent: a dashboard sees a run within a
/// second, and a busy sidecar still sends few requests.
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// Bound on one export request: a collector that hangs does not pile up requests.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the exporter could not be made.
#[derive(Debug, thiserror::Error)]
#[error("OTEL_EXPORTER_OTLP_ENDPOINT={endpoint:?}: cannot make the OTLP exporter: {reason}")]
pub struct OtelError {
    pub endpoint: String,
    pub reason: String,
}

/// The span exporter; dropping it does not flush: call [`Otel::shutdown`].
pub struct Otel {
    provider: SdkTracerProvider,
    tracer: opentelemetry_sdk::trace::SdkTracer,
}

impl Otel {
    /// Exports to `endpoint` (the OTLP/HTTP base URL: spans go to `{endpoint}/v1/traces`) as
    /// service `service`. Needs a tokio runtime (the HTTP requests run on it).
    pub fn start(endpoint: &str, service: &str) -> Result<Otel, OtelError> {
        let error = |reason: String| OtelError {
            endpoint: endpoint.to_string(),
            reason,
        };
        let client = TokioClient {
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| error(e.to_string()))?,
            runtime: tokio::runtime::Handle::current(),
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| error(e.to_string()))?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(EXPORT_DELAY)
                    .build(),
            )
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .with_resource(
                Resource::builder()
                    .with_service_name(service.to_string())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("ptc-sidecar");
        Ok(Otel { provider, tracer })
    }

    /// Sends what is queued and stops the exporter (blocking: call it off the async workers).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("OTLP exporter: {e}");
        }
    }
}

impl Observer for Otel {
    fn observe(&self, e: &Event) {
        let (name, kind) = match e.kind {
            "exec.finished" => ("exec_code", SpanKind::Server),
            "tool_call.finished" => ("tool_call", SpanKind::Internal),
            _ => return,
        };
        let (Some(trace), Some(span)) = (e.trace_id.as_deref(), e.span_id.as_deref()) else {
            return;
        };
        let (Ok(trace), Ok(span)) = (TraceId::from_hex(trace), SpanId::from_hex(span)) else {
            return;
        };
        let end = UNIX_EPOCH + Duration::from_millis(e.ts);
        let start = end
            .checked_sub(Duration::from_secs_f64(
                e.duration_ms.unwrap_or(0.0).max(0.0) / 1e3,
            ))
            .unwrap_or(end);
        let parent = match e.parent_span_id.as_deref().map(SpanId::from_hex) {
            Some(Ok(parent)) => Context::new().with_remote_span_context(SpanContext::new(
                trace,
                parent,
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            )),
            _ => Context::new(),
        };
        let mut builder = self
            .tracer
            .span_builder(match &e.tool {
                Some(tool) => format!("{name} {tool}"),
                None => name.to_string(),
            })
            .with_kind(kind)
            .with_start_time(start)
            .with_attributes(attributes(e));
        builder.trace_id = Some(trace);
        builder.span_id = Some(span);
        if e.ok == Some(false) {
            let message = e.error.as_ref().and_then(|v| v["message"].as_str());
            builder.status = Status::error(message.unwrap_or("failed").to_string());
        }
        let mut span = builder.start_with_context(&self.tracer, &parent);
        opentelemetry::trace::Span::end_with_timestamp(&mut span, end);
    }
}

/// What a span says beside its name: the event's ids and outcome.
fn attributes(e: &Event) -> Vec<KeyValue> {
    let mut out = vec![KeyValue::new("ptc.agent_id", e.agent_id.clone())];
    let text = [
        ("ptc.exec_id", &e.exec_id),
        ("ptc.call_id", &e.call_id),
        ("ptc.session_id", &e.session_id),
        ("ptc.tool", &e.tool),
    ];
    for (key, value) in text {
        if let Some(v) = value {
            out.push(KeyValue::new(key, v.clone()));
        }
    }
    if let Some(source) = e.source {
        out.push(KeyValue::new("ptc.backend", source));
    }
    if let Some(status) = e.status {
        out.push(KeyValue::new("ptc.status", status));
    }
    if let Some(kind) = e.error.as_ref().and_then(|v| v["type"].as_str()) {
        out.push(KeyValue::new("ptc.error_type", kind.to_string()));
    }
    out
}

/// The exporter's HTTP client: each request runs on the sidecar's tokio runtime (the SDK
/// exports from a thread of its own, outside any runtime) and is awaited from there.
#[derive(Debug)]
struct TokioClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for TokioClient {
    async fn send_bytes(
        &self,
        request: axum::http::Request<Bytes>,
    ) -> Result<axum::http::Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let (parts, body) = request.into_parts();
        let send = async move {
            let mut request = http.request(parts.method, parts.uri.to_string()).body(body);
            for (name, value) in &parts.headers {
                request = request.header(name, value);
            }
            let response = request.send().await?;
            let status = response.status();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        };
        let (status, bytes) = self.runtime.spawn(send).await??;
        Ok(axum::http::Response::builder().status(status).body(bytes)?)
    }
}
