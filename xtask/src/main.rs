//! Repository automation for Tenure, run as `cargo xtask <command>`.
//!
//! * `cargo xtask test`: formatting check, clippy with `-D warnings`, the whole test suite (the
//!   conformance kit against every backend included), and a summary line per backend.
//!   This is the README's test command and what `.ci/run` calls.
//! * `cargo xtask tck [--backend NAME]`: the conformance kit alone, against one backend or all.
//! * `cargo xtask stress [--minutes N]`: the long reliability run (long model tests, then
//!   election workloads under faults), with its counts.
//! * `cargo xtask bench postgres`: the PostgreSQL lease benchmark, with its baseline.
//! * `cargo xtask bench file`: the file backend's append and reopen benchmark, with its floor.
//! * `cargo xtask bench events`: append and read throughput on memory and PostgreSQL.
//!
//! It depends on nothing but std, so that it builds in seconds.

use std::collections::BTreeMap;
use std::env;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// A backend the conformance kit runs against: its package and its TCK test targets.
struct Backend {
    name: &'static str,
    package: &'static str,
    dir: &'static str,
    tests: &'static [&'static str],
}

const BACKENDS: &[Backend] = &[
    Backend {
        name: "memory",
        package: "tenure-memory",
        dir: "crates/tenure-memory",
        tests: &["tck", "tck_real_time"],
    },
    Backend {
        name: "postgres",
        package: "tenure-postgres",
        dir: "crates/tenure-postgres",
        tests: &["tck"],
    },
    Backend {
        name: "postgres-sqlx",
        package: "tenure-postgres",
        dir: "crates/tenure-postgres",
        tests: &["tck_sqlx"],
    },
    Backend {
        name: "file",
        package: "tenure-file",
        dir: "crates/tenure-file",
        tests: &["tck"],
    },
    Backend {
        name: "partial",
        package: "tenure-example-partial-adapter",
        dir: "examples/partial-adapter",
        tests: &["tck"],
    },
];

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test                    fmt check, clippy -D warnings, every test, the TCK on every backend
  tck [--backend NAME]    the conformance kit alone (backends: memory, postgres, postgres-sqlx,
                          file, partial)
  stress [--minutes N]    the long reliability run (default 10 minutes of PostgreSQL faults)
  bench postgres          the PostgreSQL lease benchmark against its single-UPDATE baseline
  bench file              the file backend's appends against raw write + fsync, and reopening
  bench events            event appends and reads, memory and PostgreSQL, against plain SQL
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test"] => test(),
        ["tck"] => tck(None),
        ["tck", "--backend", name] => tck(Some(name)),
        ["bench", "postgres"] => {
            cargo(&["bench", "-p", "tenure-postgres", "--bench", "lease_latency"])
        }
        ["stress"] => stress("10"),
        ["stress", "--minutes", minutes] => stress(minutes),
        ["bench", "file"] => cargo(&["bench", "-p", "tenure-file", "--bench", "append"]),
        ["bench", "events"] => cargo(&["bench", "-p", "tenure-postgres", "--bench", "events"]),
        ["help" | "--help" | "-h"] => {
            print!("{USAGE}");
            Ok(())
        }
        _ => Err(format!("unknown command\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn test() -> Result<(), String> {
    step("cargo fmt --check");
    cargo(&["fmt", "--all", "--", "--check"])?;
    step("cargo clippy --workspace --all-targets -- -D warnings");
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    report_postgres();
    step("cargo test --workspace");
    let run = cargo_tee(&[
        "test",
        "--workspace",
        "--no-fail-fast",
        "--",
        "--show-output",
    ])?;
    let totals = Totals::parse(&run.output);
    let tck = TckSummary::parse(&run.output);
    step("summary");
    tck.print();
    let missing: Vec<&str> = existing_backends()
        .filter(|b| !tck.by_backend.contains_key(b.name))
        .map(|b| b.name)
        .collect();
    println!(
        "tests: {} passed, {} failed, {} ignored",
        totals.passed, totals.failed, totals.ignored
    );
    if !run.success || totals.failed > 0 || tck.failed() > 0 {
        return Err("the test suite failed".into());
    }
    if !missing.is_empty() {
        return Err(format!(
            "the conformance kit did not run against: {}",
            missing.join(", ")
        ));
    }
    Ok(())
}

fn tck(backend: Option<&str>) -> Result<(), String> {
    let chosen: Vec<&Backend> = match backend {
        None => existing_backends().collect(),
        Some(name) => {
            let found = existing_backends()
                .find(|b| b.name == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = existing_backends().map(|b| b.name).collect();
                    format!("no backend {name:?}; known: {}", known.join(", "))
                })?;
            vec![found]
        }
    };
    if chosen.iter().any(|b| b.name.starts_with("postgres")) {
        report_postgres();
    }
    let mut output = String::new();
    let mut success = true;
    for backend in chosen {
        step(&format!("TCK against {}", backend.name));
        let mut args = vec!["test", "-p", backend.package];
        for test in backend.tests {
            args.extend(["--test", test]);
        }
        args.extend(["--", "--show-output"]);
        let run = cargo_tee(&args)?;
        success &= run.success;
        output.push_str(&run.output);
    }
    step("summary");
    let summary = TckSummary::parse(&output);
    summary.print();
    if !success || summary.failed() > 0 {
        return Err("the conformance kit failed".into());
    }
    Ok(())
}

fn stress(minutes: &str) -> Result<(), String> {
    report_postgres();
    // The model tests, far longer than in `cargo xtask test`: the domain's decisions against
    // the reference model, and the SQL decisions against the domain's.
    step("the lease state machine against its model, 20,000 cases");
    cargo_with_env(
        &[
            "test",
            "--release",
            "-p",
            "tenure-domain",
            "--test",
            "model",
        ],
        ("PROPTEST_CASES", "20000"),
    )?;
    step("the SQL decisions against the domain's, 1,000 cases");
    cargo_with_env(
        &[
            "test",
            "--release",
            "-p",
            "tenure-postgres",
            "--test",
            "model",
        ],
        ("PROPTEST_CASES", "1000"),
    )?;
    step("election workloads under faults");
    cargo(&[
        "run",
        "--release",
        "-p",
        "tenure-reliability",
        "--bin",
        "stress",
        "--",
        "--minutes",
        minutes,
    ])
}

fn existing_backends() -> impl Iterator<Item = &'static Backend> {
    let root = workspace_root();
    BACKENDS.iter().filter(move |b| {
        b.tests.iter().all(|t| {
            root.join(b.dir)
                .join("tests")
                .join(format!("{t}.rs"))
                .exists()
        })
    })
}

/// Says where the PostgreSQL tests will find their server, without printing a password.
fn report_postgres() {
    match env::var("TENURE_PG_URL") {
        Ok(url) => println!("xtask: PostgreSQL from TENURE_PG_URL = {}", redact(&url)),
        Err(_) => println!(
            "xtask: TENURE_PG_URL is not set; the PostgreSQL tests try a Docker engine, then a \
             local server on 127.0.0.1:5432, and fail if neither answers"
        ),
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        None => url.to_owned(),
    }
}

fn step(name: &str) {
    println!("\n==> {name}");
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo_command(args: &[&str]) -> Command {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(workspace_root());
    command
}

fn cargo(args: &[&str]) -> Result<(), String> {
    run_cargo(cargo_command(args), args)
}

fn cargo_with_env(args: &[&str], (key, value): (&str, &str)) -> Result<(), String> {
    let mut command = cargo_command(args);
    command.env(key, value);
    run_cargo(command, args)
}

fn run_cargo(mut command: Command, args: &[&str]) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run cargo {}: {e}", args.join(" ")))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo {} failed ({status})", args.join(" ")))
    }
}

struct Run {
    success: bool,
    output: String,
}

/// Runs cargo, echoing its standard output line by line while keeping a copy to parse.
fn cargo_tee(args: &[&str]) -> Result<Run, String> {
    let mut child = cargo_command(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo {}: {e}", args.join(" ")))?;
    let mut output = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("reading cargo's output: {e}"))?;
            println!("{line}");
            output.push_str(&line);
            output.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for cargo: {e}"))?;
    Ok(Run {
        success: status.success(),
        output,
    })
}

#[derive(Default, Debug, PartialEq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Adds up libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; …` lines.
    fn parse(output: &str) -> Totals {
        let mut totals = Totals::default();
        for line in output.lines() {
            let Some(rest) = line.strip_prefix("test result: ") else {
                continue;
            };
            for part in rest.split([';', '.']) {
                let mut words = part.split_whitespace();
                if let (Some(n), Some(what)) = (words.next(), words.next()) {
                    let Ok(n) = n.parse::<u64>() else { continue };
                    match what {
                        "passed" => totals.passed += n,
                        "failed" => totals.failed += n,
                        "ignored" => totals.ignored += n,
                        _ => {}
                    }
                }
            }
        }
        totals
    }
}

#[derive(Default, Debug)]
struct TckSummary {
    /// passed, failed, skipped per suite.
    by_backend: BTreeMap<String, [u64; 3]>,
}

impl TckSummary {
    /// Adds up the kit's closing lines, `tck <suite>: P passed, F failed, S skipped`, one per
    /// conformance test target (see `tenure_tck::run_suite`).
    fn parse(output: &str) -> TckSummary {
        let mut summary = TckSummary::default();
        for line in output.lines() {
            let Some((suite, counts)) = line
                .trim()
                .strip_prefix("tck ")
                .and_then(|rest| rest.split_once(": "))
            else {
                continue;
            };
            if suite.contains(char::is_whitespace) {
                continue;
            }
            let mut found = [None; 3];
            for part in counts.split(", ") {
                let mut words = part.split_whitespace();
                let (Some(n), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else { continue };
                let slot = match what {
                    "passed" => 0,
                    "failed" => 1,
                    "skipped" => 2,
                    _ => continue,
                };
                found[slot] = Some(n);
            }
            let [Some(passed), Some(failed), Some(skipped)] = found else {
                continue;
            };
            let entry = summary.by_backend.entry(suite.to_owned()).or_default();
            entry[0] += passed;
            entry[1] += failed;
            entry[2] += skipped;
        }
        summary
    }

    fn failed(&self) -> u64 {
        self.by_backend.values().map(|c| c[1]).sum()
    }

    fn print(&self) {
        if self.by_backend.is_empty() {
            println!("tck: no scenario ran");
        }
        for (suite, [passed, failed, skipped]) in &self.by_backend {
            println!("tck {suite}: {passed} passed, {failed} failed, {skipped} skipped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_libtest_lines() {
        let out = "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s\n\
                   noise\n\
                   test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.2s\n";
        assert_eq!(
            Totals::parse(out),
            Totals {
                passed: 5,
                failed: 1,
                ignored: 1
            }
        );
    }

    #[test]
    fn tck_lines_are_counted_per_suite() {
        let out = "test lease_a ... ok\n\
                   test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\
                   tck memory: 2 passed, 0 failed, 0 skipped\n\
                   tck partial: 0 passed, 0 failed, 35 skipped\n\
                   tck: failed postgres::lease_c: token: expected 1, got 2\n\
                   tck postgres: 34 passed, 1 failed, 0 skipped\n\
                   tck memory: 1 passed, 0 failed, 0 skipped\n";
        let summary = TckSummary::parse(out);
        assert_eq!(summary.by_backend["memory"], [3, 0, 0]);
        assert_eq!(summary.by_backend["partial"], [0, 0, 35]);
        assert_eq!(summary.by_backend["postgres"], [34, 1, 0]);
        assert_eq!(summary.by_backend.len(), 3);
        assert_eq!(summary.failed(), 1);
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x"),
            "postgres://app:***@db:5432/x"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1/x"),
            "postgres://postgres@127.0.0.1/x"
        );
        assert_eq!(redact("host=db user=app"), "host=db user=app");
    }
}
