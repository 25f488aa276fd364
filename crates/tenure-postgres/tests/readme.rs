//! The README's sqlx example is the crate's `examples/sqlx_election.rs`, which `cargo test`
//! compiles: so the README's text compiles too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn the_readme_shows_the_compiled_sqlx_example() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let example = include_str!("../examples/sqlx_election.rs");
    let block = format!("```rust,ignore\n{example}```\n");
    assert!(
        readme.contains(&block),
        "README.md must show examples/sqlx_election.rs verbatim in a rust,ignore block"
    );
}
