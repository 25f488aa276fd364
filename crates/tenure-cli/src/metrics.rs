//! `--metrics-listen ADDR`: the election's metrics (see `docs/operations.md`) served as
//! Prometheus text over HTTP, by `metrics-exporter-prometheus`, on any path of `ADDR`.
//!
//! The histograms are exported with buckets (not as summaries), so that they can be
//! aggregated across replicas: storage-call latency from 0.5 ms to 10 s, handover time from
//! 1 ms (a release taken up at once) to 2 minutes.

use std::net::SocketAddr;

use anyhow::Context as _;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Buckets of `tenure_storage_call_seconds`.
const CALL_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of `tenure_handover_seconds`.
const HANDOVER_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Installs the Prometheus recorder as the process's global recorder and serves it on
/// `listen`, from a task of the current tokio runtime. Call it before any elector starts.
///
/// # Errors
///
/// When `listen` cannot be bound (in use, not an address of this host) or a recorder is
/// already installed.
pub fn serve(listen: SocketAddr) -> anyhow::Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(listen)
        .set_buckets_for_metric(
            Matcher::Full("tenure_storage_call_seconds".to_owned()),
            CALL_BUCKETS,
        )
        .and_then(|builder| {
            builder.set_buckets_for_metric(
                Matcher::Full("tenure_handover_seconds".to_owned()),
                HANDOVER_BUCKETS,
            )
        })
        .and_then(PrometheusBuilder::install)
        .with_context(|| format!("serving metrics on {listen}"))?;
    tenure_election::describe_metrics();
    Ok(())
}
