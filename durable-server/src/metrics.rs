//! `/metrics`: the Prometheus exporter, and the gateway's own request metrics.
//!
//! The gateway installs `metrics-exporter-prometheus` as the process's `metrics` recorder
//! (once, the first time a router is built), so `/metrics` shows the runtime's metrics
//! (`durable_calls_total`, `durable_hibernations_total`, ... see
//! [`durable_runtime::metrics`]) beside the two below. Labels are route templates and
//! status codes, never object ids.
//!
//! The runtime registers its metric handles on first use: build the router before the
//! runtime's first call, or the calls made before have no effect on `/metrics`.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests answered, by `method`, `route` (the route template, such as
/// `/v1/objects/{type}/{id}`, or `unmatched`) and `status`.
///
/// # Examples
///
/// ```
/// assert_eq!(durable_server::metrics::HTTP_REQUESTS, "durable_http_requests_total");
/// ```
pub const HTTP_REQUESTS: &str = "durable_http_requests_total";

/// Time from receiving a request to its response, in seconds, by `method` and `route`.
///
/// # Examples
///
/// ```
/// assert_eq!(
///     durable_server::metrics::HTTP_REQUEST_DURATION,
///     "durable_http_request_duration_seconds"
/// );
/// ```
pub const HTTP_REQUEST_DURATION: &str = "durable_http_request_duration_seconds";

/// Bucket bounds of every `_seconds` histogram: from half a millisecond (a read in memory)
/// to half a minute (the default call timeout).
const SECONDS_BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// The process's Prometheus recorder, installed on first use. `None` if the application
/// installed another `metrics` recorder first: `/metrics` then answers `404`.
///
/// # Examples
///
/// ```
/// if let Some(handle) = durable_server::metrics::prometheus() {
///     metrics::counter!("example_total").increment(1);
///     assert!(handle.render().contains("example_total"));
/// }
/// ```
pub fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &SECONDS_BUCKETS)
                .expect("the bucket list is not empty");
            match builder.install_recorder() {
                Ok(handle) => {
                    describe();
                    Some(handle)
                }
                Err(error) => {
                    tracing::warn!(%error, "another metrics recorder is installed: /metrics is off");
                    None
                }
            }
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP requests answered by the gateway");
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION,
        metrics::Unit::Seconds,
        "time to answer an HTTP request"
    );
}

/// Middleware counting and timing every request under its route template.
pub(crate) async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!(HTTP_REQUEST_DURATION, "method" => method, "route" => route.clone())
        .record(started.elapsed().as_secs_f64());
    metrics::counter!(HTTP_REQUESTS, "method" => method, "route" => route, "status" => status)
        .increment(1);
    response
}

/// A bounded label for a method: the ones the gateway serves, or `other`.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
