//! `cargo xtask release-check`: the crates as crates.io and docs.rs would take them.
//!
//! 1. `cargo doc --workspace --no-deps --all-features` with `RUSTDOCFLAGS=-D warnings`: no
//!    broken intra-doc link, no missing docs.
//! 2. `cargo publish --workspace --dry-run` without the unpublished members: every published
//!    crate packages (its SQL, license files and README included) and builds from its package.
//! 3. A third party's view of the conformance kit: the partial adapter's `cargo test` reports
//!    the scenarios it cannot run as ignored, in libtest's own summary, as many as the kit's
//!    closing line says it skipped.
//! 4. The PostgreSQL adapter with each driver alone (`--no-default-features` and one driver,
//!    with and without TLS): a user of one driver compiles none of the other.

use crate::cargo;
use crate::summary::{TckSummary, Totals};

/// The members that are not published (`publish = false`).
const UNPUBLISHED: &[&str] = &[
    "tenure-reliability",
    "tenure-pg-test",
    "xtask",
    "tenure-example-partial-adapter",
];

/// The feature sets of `tenure-postgres` a user of one driver picks.
const DRIVER_ALONE: &[&str] = &["deadpool", "sqlx-0_9", "sqlx-0_9,tls"];

pub fn check() -> Result<(), String> {
    crate::step("cargo doc --workspace --no-deps --all-features (RUSTDOCFLAGS=-D warnings)");
    let mut doc = cargo::command(&["doc", "--workspace", "--no-deps", "--all-features"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    cargo::status(&mut doc)?;

    crate::step("cargo publish --workspace --dry-run (published crates only)");
    let mut args = vec!["publish", "--workspace", "--dry-run", "--allow-dirty"];
    for member in UNPUBLISHED {
        args.extend(["--exclude", member]);
    }
    cargo::run(&args)?;

    crate::step("cargo test -p tenure-example-partial-adapter --test tck");
    let run = cargo::tee(cargo::command(&[
        "test",
        "-p",
        "tenure-example-partial-adapter",
        "--test",
        "tck",
    ]))?;
    if !run.success {
        return Err("the partial adapter's conformance run failed".into());
    }
    skipped_as_ignored(&run.output)?;

    for features in DRIVER_ALONE {
        crate::step(&format!(
            "cargo check -p tenure-postgres --no-default-features --features {features}"
        ));
        cargo::run(&[
            "check",
            "-p",
            "tenure-postgres",
            "--no-default-features",
            "--features",
            features,
        ])?;
    }
    println!("xtask: the crates package, their docs build, and the kit reports skips as ignored");
    Ok(())
}

/// The kit's skip count equals libtest's ignored count, and is not zero.
fn skipped_as_ignored(output: &str) -> Result<(), String> {
    let libtest = Totals::parse(output);
    let skipped: u64 = TckSummary::parse(output)
        .by_backend
        .values()
        .map(|[_, _, skipped]| skipped)
        .sum();
    if skipped == 0 || libtest.ignored != skipped {
        return Err(format!(
            "the partial adapter's kit line says {skipped} skipped, libtest says {} ignored",
            libtest.ignored
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_must_show_as_ignored() {
        let good = "test result: ok. 2 passed; 0 failed; 35 ignored; 0 measured; 0 filtered out\n\
                    tck partial: 2 passed, 0 failed, 35 skipped\n";
        assert!(skipped_as_ignored(good).is_ok());
        let hidden = "test result: ok. 37 passed; 0 failed; 0 ignored; 0 measured\n\
                      tck partial: 2 passed, 0 failed, 35 skipped\n";
        assert!(skipped_as_ignored(hidden).is_err());
        let nothing = "test result: ok. 37 passed; 0 failed; 0 ignored; 0 measured\n";
        assert!(skipped_as_ignored(nothing).is_err());
    }
}
