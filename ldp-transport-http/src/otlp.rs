//! Exporting the spans over OTLP/HTTP (protobuf) to an OpenTelemetry collector (feature `otlp`).
//!
//! [`OtlpExport::new`] starts a batching exporter (its own thread, a blocking reqwest client) and
//! [`OtlpExport::layer`] is the `tracing` layer that turns spans into OpenTelemetry spans for it; add the layer to the
//! process's subscriber. [`OtlpExport::shutdown`] flushes what is still queued, so a short-lived process (`ldp call`)
//! loses no span. The spans' context travels between processes with [`crate::trace_context`].

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

use ldp_edge::Error;

/// The path OTLP/HTTP receivers serve traces on.
pub const TRACES_PATH: &str = "/v1/traces";

/// The traces URL for a collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read: `/v1/traces` is appended
/// unless the URL already ends with it.
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) { base.to_owned() } else { format!("{base}{TRACES_PATH}") }
}

/// A running OTLP/HTTP span exporter.
#[derive(Debug, Clone)]
pub struct OtlpExport {
    provider: SdkTracerProvider,
    service: String,
}

impl OtlpExport {
    /// Exports to the collector at `endpoint` (a base URL, see [`traces_url`]), naming this process `service`
    /// (the `service.name` resource attribute).
    pub fn new(endpoint: &str, service: &str) -> Result<Self, Error> {
        let url = traces_url(endpoint);
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Error::InvalidUrl(endpoint.to_owned()));
        }
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .build()
            .map_err(|e| Error::Otlp(e.to_string()))?;
        let resource = Resource::builder().with_service_name(service.to_owned()).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        Ok(Self { provider, service: service.to_owned() })
    }

    /// The `tracing` layer feeding this exporter.
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        tracing_opentelemetry::layer().with_tracer(self.tracer())
    }

    /// A tracer of this exporter, for spans built directly with the OpenTelemetry API (not through `tracing`).
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer(self.service.clone())
    }

    /// Sends every span ended so far, waiting for the collector's answer.
    pub fn flush(&self) -> Result<(), Error> {
        self.provider.force_flush().map_err(|e| Error::Otlp(e.to_string()))
    }

    /// Flushes and stops the exporter; spans ended later are dropped.
    pub fn shutdown(&self) -> Result<(), Error> {
        self.provider.shutdown().map_err(|e| Error::Otlp(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_appended_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/v1/traces"), "http://c:4318/v1/traces");
        assert!(OtlpExport::new("c:4318", "x").is_err());
    }
}
