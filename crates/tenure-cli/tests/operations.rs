//! `docs/operations.md` and its Grafana dashboard name only metrics that exist.
//!
//! The dashboard must parse as JSON, and every metric that a dashboard query or an alert of the
//! operations guide reads must be one of the guide's metrics table (a histogram read through its
//! `_bucket`, `_sum` or `_count` series); the table itself is checked against the library's
//! documentation by the repository checks (`cargo test -p xtask`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// The metric names of the guide's table.
fn table(guide: &str) -> BTreeSet<String> {
    let start = guide
        .find("<!-- metrics-table:start -->")
        .expect("the table's start marker");
    let end = guide
        .find("<!-- metrics-table:end -->")
        .expect("the table's end marker");
    guide[start..end]
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect()
}

/// Every `tenure_…` identifier in `query`, histogram series folded into their metric.
fn metrics_read(query: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find("tenure_") {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..len];
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        found.push(name.to_owned());
        rest = &tail[len..];
    }
    found
}

fn exprs(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => exprs(value, out),
                }
            }
        }
        serde_json::Value::Array(values) => values.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_and_the_alerts_read_only_documented_metrics() {
    let guide = std::fs::read_to_string(docs().join("operations.md")).unwrap();
    let known = table(&guide);
    assert!(
        known.contains("tenure_leader"),
        "the table lost the leader gauge: {known:?}"
    );

    let text = std::fs::read_to_string(docs().join("grafana/tenure.json")).unwrap();
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).expect("the dashboard is valid JSON");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    assert!(
        queries.len() >= 6,
        "the dashboard lost its panels: {queries:?}"
    );

    let alerts: Vec<String> = guide
        .lines()
        .filter(|line| line.contains("expr:") || line.contains("tenure_") && line.contains('('))
        .map(str::to_owned)
        .collect();
    let mut read = BTreeSet::new();
    for query in queries.iter().chain(&alerts) {
        for metric in metrics_read(query) {
            assert!(
                known.contains(&metric),
                "`{metric}` in `{query}` is not in the table"
            );
            read.insert(metric);
        }
    }
    for wanted in [
        "tenure_leader",
        "tenure_transitions_total",
        "tenure_handover_seconds",
    ] {
        assert!(read.contains(wanted), "nothing reads {wanted}");
    }
}
