//! Repository checks, run as ordinary tests (`cargo test -p xtask`), as rust-analyzer's
//! `tidy.rs` does: what no compiler checks but a reader relies on.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn read(path: &str) -> String {
    fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The lines of the first Markdown table in `text` (rows starting with `|`), trimmed.
fn first_table(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .map(str::to_owned)
        .collect()
}

/// The members of the workspace that are published (no `publish = false`).
fn published_members() -> Vec<PathBuf> {
    let mut members = Vec::new();
    for group in ["crates", "examples"] {
        let Ok(entries) = fs::read_dir(root().join(group)) else {
            continue;
        };
        for entry in entries.flatten() {
            let manifest = entry.path().join("Cargo.toml");
            if let Ok(text) = fs::read_to_string(&manifest)
                && !text.contains("publish = false")
            {
                members.push(entry.path());
            }
        }
    }
    members.sort();
    members
}

#[test]
fn the_operations_guide_shows_the_librarys_metrics_table() {
    let rustdoc: String = read("crates/tenure-election/src/metrics.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| format!("{}\n", line.trim()))
        .collect();
    let library = first_table(&rustdoc);
    let guide = read("docs/operations.md");
    let marker = "<!-- metrics-table:start -->";
    let at = guide
        .find(marker)
        .expect("docs/operations.md has the table's marker");
    let shown = first_table(&guide[at + marker.len()..]);
    assert!(
        library.len() > 2,
        "no metrics table in tenure_election::metrics"
    );
    assert_eq!(
        shown, library,
        "docs/operations.md's metrics table differs from tenure_election::metrics' docs"
    );
}

#[test]
fn published_crates_carry_their_metadata_licenses_and_purpose() {
    let members = published_members();
    assert!(members.len() >= 8, "found only {members:?}");
    for dir in members {
        let name = dir.display();
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        for key in [
            "description",
            "readme",
            "keywords",
            "categories",
            "documentation",
            "repository",
            "license",
        ] {
            assert!(
                manifest.lines().any(|line| line.starts_with(key)),
                "{name}/Cargo.toml has no `{key}`"
            );
        }
        for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(
                dir.join(license).exists(),
                "{name} does not include {license}"
            );
        }
        if let Ok(lib) = fs::read_to_string(dir.join("src/lib.rs")) {
            assert!(
                lib.starts_with("//!"),
                "{name}/src/lib.rs does not open with what the crate is for"
            );
        }
    }
}
