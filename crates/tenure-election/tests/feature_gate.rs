//! The `metrics` feature is the only way in for the `metrics` crate: without it, the
//! library's normal dependency tree holds nothing of it (`cargo tree -e normal`), and with it,
//! exactly the facade (no exporter, no `metrics-util`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// The crate names in `cargo tree -p tenure-election -e normal`, with `extra` arguments.
fn normal_dependencies(extra: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "tenure-election",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--offline", "--manifest-path", env!("CARGO_MANIFEST_PATH")])
        .args(extra)
        .output()
        .expect("running cargo tree");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut names: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn without_the_feature_nothing_of_metrics_is_a_dependency() {
    let names = normal_dependencies(&[]);
    assert!(names.iter().any(|n| n == "tokio"), "{names:?}");
    let metrics: Vec<_> = names.iter().filter(|n| n.starts_with("metrics")).collect();
    assert!(
        metrics.is_empty(),
        "pulled in without the feature: {metrics:?}"
    );
}

#[test]
fn with_the_feature_the_facade_alone_comes_in() {
    let names = normal_dependencies(&["--features", "metrics"]);
    let metrics: Vec<_> = names.iter().filter(|n| n.starts_with("metrics")).collect();
    assert_eq!(metrics, ["metrics"], "{names:?}");
}
