//! The `tenure` command never prints a password (issue 14), in any form a connection string
//! can hold one (`tenure_pg_test::secret_forms`), given on the command line or through each
//! variable that names a server, whether the command succeeds or fails; and it says which
//! variables it tried when none names a server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/command.rs"]
mod command;

use command::tenure;
use tenure_pg_test::{PrefixGuard, required_server, secret_forms, shows_a_secret, unique_prefix};

/// The arguments of one run of the command, and the variables it gets.
type Run<'a> = (Vec<String>, Vec<(&'a str, &'a str)>);

#[test]
fn no_form_of_a_password_is_printed_by_the_command() {
    let _server = required_server();
    let prefix = unique_prefix();
    let _tables = PrefixGuard::new(tenure_pg_test::LOCAL_URL.to_owned(), prefix.clone());
    for url in secret_forms("127.0.0.1", 5432) {
        let with = |command: &[&str]| -> Vec<String> {
            command
                .iter()
                .map(|s| (*s).to_owned())
                .chain(["--prefix".to_owned(), prefix.clone()])
                .collect()
        };
        let runs: Vec<Run<'_>> = vec![
            (with(&["schema", "ensure", "--database-url", &url]), vec![]),
            (with(&["leases", "--database-url", &url]), vec![]),
            (
                with(&["schema", "validate"]),
                vec![("TENURE_DATABASE_URL", &url)],
            ),
            (with(&["leases", "--json"]), vec![("DATABASE_URL", &url)]),
        ];
        for (args, env) in runs {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (output, text) = tenure(&args, &env);
            assert!(output.status.success(), "{args:?} {env:?}: {text}");
            assert!(!shows_a_secret(&text), "{args:?} {env:?} leaked: {text}");
        }
        let (_, text) = tenure(
            &with(&["schema", "validate", "--database-url", &url])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
            &[],
        );
        assert!(text.contains("are valid at"), "{text}");
    }
    // A server that does not answer: every command fails, in one line, without the password.
    for url in secret_forms("127.0.0.1", 1) {
        for args in [
            vec!["leases", "--database-url", url.as_str()],
            vec!["schema", "validate", "--database-url", url.as_str()],
            vec!["demo", "--ttl", "1s", "--postgres", url.as_str()],
            vec![
                "run",
                "--lease",
                "l",
                "--ttl",
                "1s",
                "--database-url",
                url.as_str(),
                "--",
                "true",
            ],
        ] {
            let (output, text) = tenure(&args, &[]);
            assert_eq!(output.status.code(), Some(1), "{args:?}: {text}");
            assert_eq!(text.lines().count(), 1, "{args:?}: {text}");
            assert!(!shows_a_secret(&text), "{args:?} leaked: {text}");
        }
        for variable in ["TENURE_DATABASE_URL", "DATABASE_URL"] {
            let (output, text) = tenure(&["leases"], &[(variable, &url)]);
            assert_eq!(output.status.code(), Some(1), "{text}");
            assert!(!shows_a_secret(&text), "{variable} leaked: {text}");
        }
        let (output, text) = tenure(
            &["demo", "--ttl", "1s", "--postgres"],
            &[("TENURE_DATABASE_URL", &url)],
        );
        assert_eq!(output.status.code(), Some(1), "{text}");
        assert!(!shows_a_secret(&text), "demo leaked: {text}");
    }
    // libpq's variables, PGPASSWORD included.
    let (output, text) = tenure(
        &["schema", "validate", "--prefix", &prefix],
        &[
            ("PGHOST", "127.0.0.1"),
            ("PGUSER", "postgres"),
            ("PGPASSWORD", tenure_pg_test::SECRET),
        ],
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("PG* variables"), "{text}");
    assert!(!shows_a_secret(&text), "PGPASSWORD leaked: {text}");
}

#[test]
fn a_missing_server_names_the_variables_tried() {
    for args in [
        vec!["leases"],
        vec!["schema", "validate"],
        vec!["demo", "--postgres"],
        vec!["run", "--lease", "l", "--ttl", "1s", "--", "true"],
    ] {
        let (output, text) = tenure(&args, &[]);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {text}");
        for variable in [
            "TENURE_DATABASE_URL",
            "DATABASE_URL",
            "PGHOST",
            "PGPORT",
            "PGUSER",
        ] {
            assert!(
                text.contains(variable),
                "{args:?}: {variable} not named: {text}"
            );
        }
    }
}
