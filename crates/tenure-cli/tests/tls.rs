//! The `tenure` command over TLS (issue 14), against a throwaway cluster with a certificate
//! authority made by the test: `verify-full` with the CA works from a URL and from libpq's
//! variables; a wrong CA fails with a one-line error that says it is about TLS.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/command.rs"]
mod command;

use command::tenure;
use tenure_pg_test::cluster::Cluster;
use tenure_pg_test::tls::TestCa;

#[test]
fn verify_full_works_from_the_command_and_a_wrong_ca_is_a_tls_error() {
    let ca = TestCa::create().expect("a CA (the openssl command)");
    let wrong = TestCa::create().expect("a CA (the openssl command)");
    let cluster = Cluster::create().expect("a throwaway cluster (PostgreSQL's binaries)");
    cluster.enable_tls(&ca).unwrap();
    cluster.start().unwrap();
    let port = cluster.port().to_string();
    let root = ca.root_cert().display().to_string();
    let url = format!(
        "postgres://postgres@localhost:{port}/postgres?sslmode=verify-full&sslrootcert={root}"
    );

    let (output, text) = tenure(&["schema", "ensure", "--database-url", &url], &[]);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("are in place"), "{text}");

    let (output, text) = tenure(
        &["leases"],
        &[
            ("PGHOST", "localhost"),
            ("PGPORT", &port),
            ("PGUSER", "postgres"),
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", &root),
        ],
    );
    assert!(output.status.success(), "{text}");

    let wrong_url = url.replace(&root, &wrong.root_cert().display().to_string());
    let (output, text) = tenure(&["schema", "validate", "--database-url", &wrong_url], &[]);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("TLS handshake failed"), "{text}");
    assert!(text.contains("not signed by a trusted root"), "{text}");
}
