//! `tenure run` gives up on an error no retry can mend, with a clear message and a non-zero
//! code, and keeps retrying one that a retry may mend (issue 14).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tenure_pg_test::{DropGuard, PrefixGuard, required_server, unique_name, unique_prefix};

fn run(url: &str, prefix: &str, schema: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "run", "--lease", "l", "--ttl", "1s", "--schema", schema, "--prefix", prefix,
        ])
        .args(["--database-url", url, "--", "sleep", "30"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to `within` for `child` to exit; its code and stderr, or None if it still runs
/// (then it is killed).
fn exit_within(mut child: Child, within: Duration) -> Option<(i32, String)> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            return Some((output.status.code().unwrap_or(-1), stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_missing_schema_or_privilege_ends_the_run_and_an_unreachable_server_does_not() {
    let server = required_server();
    // No tables at all, and nothing checked at the start: the first lease call says so.
    let prefix = unique_prefix();
    let (code, stderr) = exit_within(run(&server.url, &prefix, "none"), Duration::from_secs(15))
        .expect("tenure run kept retrying a missing schema");
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("gave up on lease l"), "{stderr}");
    // A contender's first call is `request_lease_v5` (it did not hold the lease before).
    assert!(
        stderr.contains(&format!("{prefix}request_lease_v5")),
        "{stderr}"
    );

    // The tables exist, but the role may not use them (v5 is the function of a contender's
    // first call).
    let prefix = unique_prefix();
    let _tables = PrefixGuard::new(server.url.clone(), prefix.clone());
    let role = unique_name("tenure_role");
    let _role = DropGuard::role(server.url.clone(), &role);
    let sql = tenure_postgres_ddl(&prefix);
    tenure_pg_test::execute_detached(
        &server.url,
        &tenure_pg_test::serialized(&format!(
            "{sql}; CREATE ROLE {role} LOGIN; \
             REVOKE EXECUTE ON FUNCTION {prefix}request_lease_v5(text, text, bigint, bigint, \
             bigint, bigint, bigint, timestamptz) FROM PUBLIC"
        )),
    )
    .unwrap();
    let role_url = tenure_pg_test::with_user(&server.url, &role);
    let (code, stderr) = exit_within(run(&role_url, &prefix, "none"), Duration::from_secs(15))
        .expect("tenure run kept retrying a missing privilege");
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("EXECUTE on function {prefix}request_lease_v5")),
        "{stderr}"
    );
    // Validate, at the start, names it as well.
    let (code, stderr) = exit_within(run(&role_url, &prefix, "validate"), Duration::from_secs(15))
        .expect("tenure run kept retrying a missing privilege");
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "lacks EXECUTE on function {prefix}request_lease_v5"
        )),
        "{stderr}"
    );

    // A server that does not answer may answer later: the run keeps trying.
    let still = exit_within(
        run("postgres://postgres@127.0.0.1:1/postgres", &prefix, "none"),
        Duration::from_secs(3),
    );
    assert!(
        still.is_none(),
        "tenure run gave up on an unreachable server: {still:?}"
    );
}

#[test]
fn a_wrong_password_ends_the_run() {
    use tenure_pg_test::cluster::Cluster;
    let cluster = Cluster::create().expect("a throwaway cluster (PostgreSQL's binaries)");
    cluster.start().unwrap();
    tenure_pg_test::execute_detached(&cluster.url(), "ALTER ROLE postgres PASSWORD 'right'")
        .unwrap();
    cluster.require_passwords().unwrap();
    cluster.reload().unwrap();
    let port = cluster.port();
    let wrong = format!("postgres://postgres:Wr0ng-Pw@127.0.0.1:{port}/postgres");
    // Wait for the reload: the right password must be needed.
    let right = format!("postgres://postgres:right@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + Duration::from_secs(10);
    while tenure_pg_test::execute_detached(&wrong, "SELECT 1").is_ok() && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    tenure_pg_test::execute_detached(&right, "SELECT 1").unwrap();
    for schema in ["ensure", "none"] {
        let (code, stderr) = exit_within(run(&wrong, "tenure_", schema), Duration::from_secs(15))
            .unwrap_or_else(|| {
                panic!("--schema {schema}: tenure run kept retrying a wrong password")
            });
        assert_eq!(code, 1, "{stderr}");
        assert!(
            stderr.contains("password authentication failed"),
            "{schema}: {stderr}"
        );
        assert!(
            !stderr.contains("wrong"),
            "{schema}: the password leaked: {stderr}"
        );
    }
}

fn tenure_postgres_ddl(prefix: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["ddl", "--prefix", prefix])
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}
