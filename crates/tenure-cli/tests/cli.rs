//! The small commands, and how `tenure` fails: one line on stderr, a non-zero exit, no panic,
//! no password.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use tenure_pg_test::{PrefixGuard, required_server, server, unique_name, unique_prefix};

fn tenure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("TENURE_DATABASE_URL")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// A failure: non-zero exit, exactly one line on stderr, nothing on stdout.
fn assert_one_line_failure(output: &Output, code: i32) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, got: {stderr}");
    assert!(stderr.starts_with("tenure: error: "), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"));
    assert!(output.stdout.is_empty());
    stderr
}

#[test]
fn usage_errors_are_one_line() {
    let stderr = assert_one_line_failure(&tenure(&["demo", "--ttl", "2"]), 2);
    assert!(stderr.contains("no unit"), "{stderr}");
    assert_one_line_failure(&tenure(&["frobnicate"]), 2);
    assert_one_line_failure(&tenure(&["run", "--lease", "x"]), 2);
    let stderr = assert_one_line_failure(&tenure(&["demo", "--ttl", "5ms"]), 1);
    assert!(stderr.contains("ttl"), "{stderr}");
}

#[test]
fn help_and_version_succeed() {
    let help = tenure(&["--help"]);
    assert!(help.status.success());
    let help = text(&help.stdout);
    for command in ["demo", "run", "leases", "ddl", "schema"] {
        assert!(help.contains(command), "{help}");
    }
    assert!(!help.contains("__guard"));
    assert!(tenure(&["--version"]).status.success());
}

#[test]
fn ddl_prints_the_tables_of_a_prefix_and_refuses_a_bad_one() {
    let output = tenure(&["ddl", "--prefix", "billing_"]);
    assert!(output.status.success());
    let sql = text(&output.stdout);
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS billing_leases"),
        "{sql}"
    );
    assert!(sql.contains("billing_lease_contenders"));
    assert_one_line_failure(&tenure(&["ddl", "--prefix", "x; DROP TABLE y"]), 1);
}

#[test]
fn a_password_never_appears_in_a_usage_or_parse_error() {
    // Every form of a password, through every command and variable, when the server answers
    // or not: `tests/secrets.rs`. Here the errors about the string itself.
    let secret = "s3cr3t-Pa55";
    let unparsable = format!("postgres://app:{secret}@127.0.0.1:notaport/app");
    for args in [
        vec!["leases", "--database-url", unparsable.as_str()],
        vec!["schema", "validate", "--database-url", unparsable.as_str()],
        vec!["demo", "--ttl", "1s", "--postgres", unparsable.as_str()],
        vec![
            "run",
            "--lease",
            "l",
            "--ttl",
            "1s",
            "--database-url",
            unparsable.as_str(),
            "--",
            "true",
        ],
    ] {
        let output = tenure(&args);
        let stderr = assert_one_line_failure(&output, 1);
        assert!(!stderr.contains(secret), "{args:?} leaked: {stderr}");
    }
    let output = tenure(&["leases", &format!("postgres://app:{secret}@h/db")]);
    let stderr = assert_one_line_failure(&output, 2);
    assert!(!stderr.contains(secret), "{stderr}");
}

#[test]
fn schema_validate_ensure_and_leases() {
    let server = match server() {
        Ok(server) => server,
        Err(message) => panic!("{message}"),
    };
    let prefix = unique_prefix();
    let _tables = PrefixGuard::new(server.url.clone(), prefix.clone());
    let db = [
        "--database-url",
        server.url.as_str(),
        "--prefix",
        prefix.as_str(),
    ];
    let with_db = |command: &[&str]| {
        let args: Vec<&str> = command.iter().chain(db.iter()).copied().collect();
        tenure(&args)
    };

    let stderr = assert_one_line_failure(&with_db(&["schema", "validate"]), 1);
    assert!(
        stderr.contains(&format!("{prefix}leases is missing")),
        "{stderr}"
    );
    let ensured = with_db(&["schema", "ensure"]);
    assert!(ensured.status.success(), "{}", text(&ensured.stderr));
    assert!(with_db(&["schema", "validate"]).status.success());
    let empty = with_db(&["leases"]);
    assert!(text(&empty.stdout).starts_with("no leases"));

    // One holder, one lease: run a command that lists the leases while it holds one.
    let lease = unique_name("listed");
    let tenure_bin = env!("CARGO_BIN_EXE_tenure");
    let script = format!("\"{tenure_bin}\" leases --json --prefix {prefix}");
    let output = Command::new(tenure_bin)
        .args([
            "run",
            "--lease",
            &lease,
            "--owner",
            "lister",
            "--priority",
            "-3",
            "--ttl",
            "5s",
        ])
        .args(db)
        .args(["--", "sh", "-c", &script])
        .env("TENURE_DATABASE_URL", &server.url)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let leases = json["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0]["lease_name"], lease.as_str());
    assert_eq!(leases[0]["owner"], "lister");
    assert_eq!(leases[0]["fencing_token"], 1);
    assert_eq!(leases[0]["live"], true);
    assert_eq!(leases[0]["contenders"][0]["priority"], -3);
    assert!(json["now"].as_str().unwrap().ends_with('Z'));

    assert_eq!(leases[0]["state"], "live");
    assert_eq!(leases[0]["released_at"], serde_json::Value::Null);
    assert!(leases[0]["remaining_ms"].as_u64().unwrap() > 0);
    let acquired = leases[0]["acquired_at"].as_str().unwrap();
    assert!(acquired <= leases[0]["heartbeat_at"].as_str().unwrap());

    // Released on exit: listed as released (not expired), token kept.
    let table = text(&with_db(&["leases"]).stdout);
    let header = table.lines().next().unwrap();
    assert!(
        header.find("ACQUIRED") < header.find("HEARTBEAT"),
        "the acquisition comes first: {header}"
    );
    let row = table.lines().find(|l| l.starts_with(&lease)).unwrap();
    assert!(row.contains("released ") && row.contains(" ago"), "{table}");
    assert!(!row.contains("expired"), "{table}");
    assert!(table.contains("judged on the database's clock"));
    let json: serde_json::Value =
        serde_json::from_slice(&with_db(&["leases", "--json"]).stdout).unwrap();
    let released = &json["leases"][0];
    assert_eq!(released["state"], "released");
    assert_eq!(released["live"], false);
    assert_eq!(released["fencing_token"], 1);
    assert_eq!(released["remaining_ms"], 0);
    assert!(released["released_at"].as_str().unwrap() >= acquired);
}

#[test]
fn leases_watch_follows_a_crashed_holder_from_live_to_expired() {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let server = required_server();
    let prefix = unique_prefix();
    let _tables = PrefixGuard::new(server.url.clone(), prefix.clone());
    let lease = unique_name("crashing");
    let ensured = tenure(&[
        "schema",
        "ensure",
        "--database-url",
        &server.url,
        "--prefix",
        &prefix,
    ]);
    assert!(ensured.status.success(), "{}", text(&ensured.stderr));
    // A holder that is killed outright (SIGKILL): nothing releases its lease.
    let mut holder = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["run", "--lease", &lease, "--owner", "doomed", "--ttl", "1s"])
            .args(["--prefix", &prefix, "--", "sleep", "60"])
            .env("TENURE_DATABASE_URL", &server.url)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut watch = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_tenure"))
            .args(["leases", "--watch", "200ms", "--json", "--prefix", &prefix])
            .env("TENURE_DATABASE_URL", &server.url)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(watch.0.stdout.take().unwrap()).lines();
    let began = Instant::now();
    let mut states = Vec::new();
    let mut killed = false;
    while states.last().map(String::as_str) != Some("expired") {
        assert!(began.elapsed() < Duration::from_secs(20), "{states:?}");
        let line = lines.next().unwrap().unwrap();
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        let Some(listed) = json["leases"].as_array().unwrap().first() else {
            continue; // before the holder's first request
        };
        let state = listed["state"].as_str().unwrap().to_owned();
        if state == "live" && !killed {
            holder.0.kill().unwrap();
            holder.0.wait().unwrap();
            killed = true;
        }
        if states.last() != Some(&state) {
            states.push(state);
        }
    }
    assert_eq!(states, ["live", "expired"], "never shown as released");
    // Interrupted, it stops at once and cleanly.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(watch.0.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = watch.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(5),
            "--watch ignored SIGINT"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status:?}");
}

/// A child process that is killed if the test ends (or fails) before it exits.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_watch_interval_below_100ms_is_refused() {
    let stderr = assert_one_line_failure(
        &tenure(&[
            "leases",
            "--watch",
            "10ms",
            "--database-url",
            "postgres://h/db",
        ]),
        2,
    );
    assert!(stderr.contains("too short"), "{stderr}");
}
