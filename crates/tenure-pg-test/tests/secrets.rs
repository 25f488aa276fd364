//! The test helpers never print a password (issue 14): the server line of `server()` and the
//! `Debug` of the server, for a server named with a password in each form, through each
//! variable that can name it, reachable or not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use tenure_pg_test::{secret_forms, shows_a_secret};

#[test]
fn no_form_of_a_password_is_printed() {
    let variables = ["TENURE_DATABASE_URL", "TENURE_PG_URL", "DATABASE_URL"];
    let mut reached = 0;
    for (host, port) in [("127.0.0.1", 5432), ("127.0.0.1", 1)] {
        for url in secret_forms(host, port) {
            for variable in variables {
                let mut command = Command::new(env!("CARGO_BIN_EXE_tenure-pg-server"));
                for other in variables
                    .iter()
                    .chain(["PGHOST", "PGPORT", "PGUSER", "PGDATABASE"].iter())
                {
                    command.env_remove(other);
                }
                let output = command.env(variable, &url).output().unwrap();
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
                assert!(!shows_a_secret(&text), "{variable}={url}: {text}");
                assert!(text.contains("tenure-pg-test: "), "{text}");
                if port == 1 {
                    assert!(!output.status.success(), "{text}");
                    assert!(text.contains("does not answer"), "{text}");
                } else {
                    // The local server (trust authentication) lets every form in.
                    assert!(output.status.success(), "{variable}={url}: {text}");
                    assert!(text.contains(&format!("from {variable}")), "{text}");
                    reached += 1;
                }
            }
        }
    }
    assert_eq!(reached, 6 * variables.len());
}
