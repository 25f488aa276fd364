//! Repository automation for Tenure, run as `cargo xtask <command>`.
//!
//! * `cargo xtask test [--require-containers]`: formatting check, clippy with `-D warnings`,
//!   the whole test suite (the conformance kit against every backend included), then the
//!   conformance kit against PostgreSQL 15 and 17 in containers when a Docker engine answers,
//!   and a summary line per backend and server. This is the README's test command and what
//!   `.ci/run` calls (with `--require-containers`: no engine is then an error).
//! * `cargo xtask tck [--backend NAME] [--pg-version N]`: the conformance kit alone, against
//!   one backend or all; PostgreSQL in a container when an engine answers (of version N).
//! * `cargo xtask pg-server`: which PostgreSQL server the tests would use, and why (passwords
//!   hidden).
//! * `cargo xtask pg-image [--pg-version N]`: builds the local PostgreSQL images the
//!   containers run (no registry needed), both versions or one.
//! * `cargo xtask release-check`: the docs under `-D warnings`, `cargo publish --dry-run` of
//!   every published crate, and the conformance kit's skips shown as ignored by `cargo test`
//!   for a third-party adapter (see [`release`]).
//! * `cargo xtask stress [--minutes N]`: the long reliability run (long model tests, then
//!   election workloads under faults, then rounds of the bounded fault-class tests), with its
//!   counts.
//! * `cargo xtask bench postgres`: the PostgreSQL lease benchmark, with its baseline.
//! * `cargo xtask bench metrics`: the processor's throughput without and with the `metrics`
//!   feature (and the Prometheus recorder), in one run.
//! * `cargo xtask bench file`: the file backend's append and reopen benchmark, with its floor.
//! * `cargo xtask bench events`: append and read throughput on memory and PostgreSQL.
//! * `cargo xtask bench handover`: graceful and planned handover times on memory and
//!   PostgreSQL, with etcd's election as the anchor when it is installed.
//! * `cargo xtask bench scale`: the largest number of leases (× 3 contenders, a request a
//!   second each) one PostgreSQL storage sustains, against the single-UPDATE floor.
//!
//! Where the PostgreSQL tests find their server is decided in [`postgres`]; `docs/testing.md`
//! tells it for contributors. It depends on nothing but std, so that it builds in seconds.

mod cargo;
mod postgres;
mod prereq;
mod release;
mod summary;
#[cfg(test)]
mod tidy;

use std::env;
use std::process::ExitCode;

use postgres::Plan;
use summary::{TckSummary, Totals};

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
  test [--require-containers]
                          fmt check, clippy -D warnings, every test, the TCK on every backend,
                          then the TCK on PostgreSQL 15 and 17 in containers if Docker answers
  tck [--backend NAME] [--pg-version N]
                          the conformance kit alone (backends: memory, postgres, file, partial)
  pg-server               say which PostgreSQL server the tests would use, and why
  pg-image [--pg-version N]
                          build the local PostgreSQL images for containers (15, 17)
  release-check           docs under -D warnings, publish dry-run, the kit's skips as ignored
  stress [--minutes N]    the long reliability run (default 10 minutes of PostgreSQL faults)
  bench postgres          the PostgreSQL lease benchmark against its single-UPDATE baseline
  bench metrics           the processor's throughput with the metrics feature off and on
  bench file              the file backend's appends against raw write + fsync, and reopening
  bench events            event appends and reads, memory and PostgreSQL, against plain SQL
  bench handover          graceful and planned handover times, memory and PostgreSQL, against etcd
  bench scale             how many leases x 3 contenders one PostgreSQL storage sustains
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["test", flags @ ..] => match flags {
            [] => test(false),
            ["--require-containers"] => test(true),
            _ => Err(format!("unknown option\n\n{USAGE}")),
        },
        ["tck", flags @ ..] => Options::parse(flags, &["--backend", "--pg-version"])
            .and_then(|o| tck(o.get("--backend"), o.version()?)),
        ["pg-server"] => {
            Plan::decide(None).say();
            Ok(())
        }
        ["pg-image", flags @ ..] => Options::parse(flags, &["--pg-version"])
            .and_then(|o| postgres::build_images(o.version()?)),
        ["bench", "postgres"] => {
            cargo::run(&["bench", "-p", "tenure-postgres", "--bench", "lease_latency"])
        }
        ["release-check"] => release::check(),
        ["stress"] => stress("10"),
        ["stress", "--minutes", minutes] => stress(minutes),
        ["bench", "metrics"] => bench_metrics(),
        ["bench", "file"] => cargo::run(&["bench", "-p", "tenure-file", "--bench", "append"]),
        ["bench", "events"] => cargo::run(&["bench", "-p", "tenure-postgres", "--bench", "events"]),
        ["bench", "scale"] => cargo::run(&["bench", "-p", "tenure-postgres", "--bench", "scale"]),
        ["bench", "handover"] => {
            cargo::run(&["bench", "-p", "tenure-reliability", "--bench", "handover"])
        }
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

/// `--name value` options of a command.
struct Options<'a> {
    values: Vec<(&'a str, &'a str)>,
}

impl<'a> Options<'a> {
    fn parse(args: &[&'a str], known: &[&str]) -> Result<Options<'a>, String> {
        let mut values = Vec::new();
        let mut rest = args;
        while let [name, tail @ ..] = rest {
            let [value, tail @ ..] = tail else {
                return Err(format!("{name} needs a value\n\n{USAGE}"));
            };
            if !known.contains(name) || values.iter().any(|(n, _)| n == name) {
                return Err(format!("unknown or repeated option {name}\n\n{USAGE}"));
            }
            values.push((*name, *value));
            rest = tail;
        }
        Ok(Options { values })
    }

    fn get(&self, name: &str) -> Option<&'a str> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    fn version(&self) -> Result<Option<u32>, String> {
        self.get("--pg-version")
            .map(|v| {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n >= 10)
                    .ok_or_else(|| format!("--pg-version {v}: not a PostgreSQL major version"))
            })
            .transpose()
    }
}

fn test(require_containers: bool) -> Result<(), String> {
    let engine = postgres::probe(env::var("DOCKER_HOST").ok().as_deref());
    if let (Err(why), true) = (&engine, require_containers) {
        return Err(format!(
            "--require-containers, but no Docker engine answers ({why})"
        ));
    }
    prereq::ensure()?;
    step("cargo fmt --check");
    cargo::run(&["fmt", "--all", "--", "--check"])?;
    step("cargo clippy --workspace --all-targets -- -D warnings");
    cargo::run(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    if engine.is_ok() {
        step("cargo clippy -p tenure-pg-test --features docker (target/containers)");
        let mut clippy = cargo::command(&[
            "clippy",
            "-p",
            "tenure-pg-test",
            "--features",
            "docker",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]);
        clippy.env("CARGO_TARGET_DIR", postgres::containers_target_dir());
        cargo::status(&mut clippy)?;
    }

    let main = Plan::main_suite();
    main.say();
    step("cargo test --workspace");
    let run =
        cargo::tee(main.cargo_test(&["--workspace", "--no-fail-fast", "--", "--show-output"]))?;
    let mut success = run.success;
    let mut totals = Totals::parse(&run.output);
    let mut tck = TckSummary::parse(&run.output).labelled(uses_postgres, &main.label());

    let mut not_run = Vec::new();
    match engine {
        Ok(socket) => {
            // In addition to the full suite's server, TENURE_PG_URL included: these runs are
            // the versions' own.
            for &version in postgres::VERSIONS {
                let plan = Plan::container(&socket, version);
                plan.say();
                for backend in existing_backends().filter(|b| uses_postgres(b.name)) {
                    let (ok, run_totals, summary) = run_tck(backend, &plan)?;
                    let label = format!("{} ({})", backend.name, plan.label());
                    if summary.ran(&label) == 0 {
                        not_run.push(label);
                    }
                    success &= ok;
                    totals.add(&run_totals);
                    tck.merge(summary);
                }
            }
        }
        Err(why) => println!(
            "\nxtask: no Docker engine answers ({why}): the conformance kit does not run in \
             containers of PostgreSQL {:?}; docs/testing.md tells how to start one",
            postgres::VERSIONS
        ),
    }

    step("summary");
    tck.print();
    not_run.extend(
        existing_backends()
            .filter(|b| tck.ran(b.name) == 0)
            .map(|b| b.name.to_owned()),
    );
    println!(
        "tests: {} passed, {} failed, {} ignored",
        totals.passed, totals.failed, totals.ignored
    );
    if !success || totals.failed > 0 || tck.failed() > 0 {
        return Err("the test suite failed".into());
    }
    if !not_run.is_empty() {
        return Err(format!(
            "the conformance kit did not run against: {}",
            not_run.join(", ")
        ));
    }
    Ok(())
}

fn tck(backend: Option<&str>, pg_version: Option<u32>) -> Result<(), String> {
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
    let plan = Plan::decide(pg_version);
    if chosen.iter().any(|b| uses_postgres(b.name)) {
        plan.say();
    } else if pg_version.is_some() {
        return Err("--pg-version is for the PostgreSQL backends".into());
    }
    let mut summary = TckSummary::default();
    let mut success = true;
    for backend in chosen {
        let (ok, _, run) = run_tck(backend, &plan)?;
        success &= ok;
        summary.merge(run);
    }
    step("summary");
    summary.print();
    if !success || summary.failed() > 0 {
        return Err("the conformance kit failed".into());
    }
    Ok(())
}

/// Runs one backend's TCK targets, its PostgreSQL suites against the server of `plan`.
fn run_tck(backend: &Backend, plan: &Plan) -> Result<(bool, Totals, TckSummary), String> {
    let mut args = vec!["-p", backend.package];
    for test in backend.tests {
        args.extend(["--test", test]);
    }
    args.extend(["--", "--show-output"]);
    let command = if uses_postgres(backend.name) {
        plan.check_image()?;
        step(&format!("TCK against {} ({})", backend.name, plan.label()));
        plan.cargo_test(&args)
    } else {
        step(&format!("TCK against {}", backend.name));
        let mut all = vec!["test"];
        all.extend(&args);
        cargo::command(&all)
    };
    let run = cargo::tee(command)?;
    if uses_postgres(backend.name) {
        postgres::sweep(plan)?;
    }
    let summary = TckSummary::parse(&run.output).labelled(uses_postgres, &plan.label());
    Ok((run.success, Totals::parse(&run.output), summary))
}

/// Whether a backend (or a suite of the kit, named after its backend) needs PostgreSQL:
/// `postgres` and its variants (`postgres-…`).
fn uses_postgres(name: &str) -> bool {
    name == "postgres" || name.starts_with("postgres-")
}

fn stress(minutes: &str) -> Result<(), String> {
    Plan::main_suite().say();
    // The model tests, far longer than in `cargo xtask test`: the domain's decisions against
    // the reference model, and the SQL decisions against the domain's.
    step("the lease state machine against its model, 20,000 cases");
    let mut model = cargo::command(&[
        "test",
        "--release",
        "-p",
        "tenure-domain",
        "--test",
        "model",
    ]);
    cargo::status(model.env("PROPTEST_CASES", "20000"))?;
    step("the SQL decisions against the domain's, 1,000 cases");
    let mut model = cargo::command(&[
        "test",
        "--release",
        "-p",
        "tenure-postgres",
        "--test",
        "model",
    ]);
    cargo::status(model.env("PROPTEST_CASES", "1000"))?;
    step("election workloads under faults");
    cargo::run(&[
        "run",
        "--release",
        "-p",
        "tenure-reliability",
        "--bin",
        "stress",
        "--",
        "--minutes",
        minutes,
    ])?;
    let rounds = fault_rounds(minutes);
    for round in 1..=rounds {
        for (class, package, tests) in FAULT_CLASSES {
            step(&format!("{class}: round {round} of {rounds}"));
            let mut args = vec!["test", "--release", "-p", package];
            for test in *tests {
                args.extend(["--test", test]);
            }
            cargo::run(&args)?;
        }
    }
    println!("\nstress: every fault class passed {rounds} round(s)");
    Ok(())
}

/// The fault classes whose tests are bounded runs with fresh randomness, timing and servers
/// each time (issue 16): `cargo xtask stress` repeats them, one round per 5 minutes asked for
/// (at least one). Each: what, the package, its test targets.
const FAULT_CLASSES: &[(&str, &str, &[&str])] = &[
    (
        "clock steps (wall clock under libfaketime, a PostgreSQL server's clock)",
        "tenure-reliability",
        &["clock_steps", "postgres_clock_steps"],
    ),
    (
        "schema changes under load and a rolling upgrade",
        "tenure-postgres",
        &["schema_change", "rolling_upgrade"],
    ),
    (
        "hostile payloads on PostgreSQL (the kit on both drivers, an undecodable event)",
        "tenure-postgres",
        &["tck", "tck_sqlx", "undecodable"],
    ),
    (
        "file recovery: damage, garbage, killed writers, hostile payloads",
        "tenure-file",
        &["corruption", "crash", "reopen"],
    ),
    (
        "database failover, synchronous and asynchronous",
        "tenure-reliability",
        &["failover"],
    ),
    (
        "wake-ups under churn",
        "tenure-reliability",
        &["postgres_wakeups"],
    ),
];

/// Rounds of the fault classes for a stress run of `minutes`: one per 5 minutes, at least one.
fn fault_rounds(minutes: &str) -> u64 {
    minutes.parse::<u64>().map_or(1, |m| (m / 5).max(1))
}

fn existing_backends() -> impl Iterator<Item = &'static Backend> {
    let root = cargo::workspace_root();
    BACKENDS.iter().filter(move |b| {
        b.tests.iter().all(|t| {
            root.join(b.dir)
                .join("tests")
                .join(format!("{t}.rs"))
                .exists()
        })
    })
}

/// The processor benchmark built three ways: the feature off, on without a recorder, on with
/// the Prometheus recorder `tenure run --metrics-listen` installs; three passes over the
/// three, so that a change of the machine's speed during the run shows as such (the builds
/// cannot share one process, so their rounds cannot be interleaved more finely).
fn bench_metrics() -> Result<(), String> {
    let bench = ["bench", "-p", "tenure-election", "--bench", "processor"];
    for pass in 1..=3 {
        step(&format!("pass {pass} of 3"));
        cargo::run(&bench)?;
        cargo::run(&[&bench[..], &["--features", "metrics"]].concat())?;
        cargo::run(
            &[
                &bench[..],
                &["--features", "metrics", "--", "--with-recorder"],
            ]
            .concat(),
        )?;
    }
    Ok(())
}

fn step(name: &str) {
    println!("\n==> {name}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stress_repeats_the_fault_classes_once_per_five_minutes() {
        assert_eq!(fault_rounds("10"), 2);
        assert_eq!(fault_rounds("4"), 1);
        assert_eq!(fault_rounds("not a number"), 1);
    }

    #[test]
    fn every_fault_class_names_test_targets_that_exist() {
        let root = cargo::workspace_root();
        for (class, package, tests) in FAULT_CLASSES {
            for test in *tests {
                let path = root
                    .join("crates")
                    .join(package)
                    .join("tests")
                    .join(format!("{test}.rs"));
                assert!(path.exists(), "{class}: no {}", path.display());
            }
        }
    }

    #[test]
    fn options_are_pairs_of_known_names_and_values() {
        let o = Options::parse(
            &["--backend", "postgres", "--pg-version", "15"],
            &["--backend", "--pg-version"],
        )
        .unwrap();
        assert_eq!(o.get("--backend"), Some("postgres"));
        assert_eq!(o.version(), Ok(Some(15)));
        assert!(Options::parse(&["--backend"], &["--backend"]).is_err());
        assert!(Options::parse(&["--minutes", "3"], &["--backend"]).is_err());
        let o = Options::parse(&["--pg-version", "x"], &["--pg-version"]).unwrap();
        assert!(o.version().is_err());
    }

    #[test]
    fn postgres_variants_use_postgres() {
        assert!(uses_postgres("postgres"));
        assert!(uses_postgres("postgres-sqlx"));
        assert!(!uses_postgres("postgresql"));
        assert!(!uses_postgres("memory"));
    }
}
