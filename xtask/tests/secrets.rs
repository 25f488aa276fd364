//! `cargo xtask` never prints a password (issue 14): the plan it says for a server named with a
//! password in each form (the forms of `tenure_pg_test::secret_forms`, which the xtask cannot
//! depend on), through each variable that can name it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const SECRET: &str = "Sx3cr3t-Pw";
const ENCODED: [&str; 2] = ["p%40ss-Sx9", "p@ss-Sx9"];

#[test]
fn no_form_of_a_password_is_printed() {
    let [encoded, _] = ENCODED;
    let forms = [
        format!("postgres://postgres:{SECRET}@127.0.0.1:5432/postgres"),
        format!("postgres://postgres@127.0.0.1:5432/postgres?password={SECRET}"),
        format!("host=127.0.0.1 user=postgres password={SECRET}"),
        format!("host=127.0.0.1 user=postgres password='{SECRET} x\\\\y' dbname=postgres"),
        format!("postgresql://postgres:{encoded}@127.0.0.1/postgres"),
        format!("postgres://postgres@127.0.0.1/postgres?%70assword={encoded}"),
        format!("postgres://postgres:{SECRET}@127.0.0.1:notaport/postgres"),
    ];
    let variables = ["TENURE_DATABASE_URL", "TENURE_PG_URL", "DATABASE_URL"];
    for url in &forms {
        for variable in variables {
            let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
            for other in variables {
                command.env_remove(other);
            }
            let output = command
                .arg("pg-server")
                .env(variable, url)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(output.status.success(), "{text}");
            assert!(
                text.contains(&format!("from {variable}")),
                "{variable}={url}: {text}"
            );
            for secret in [SECRET, ENCODED[0], ENCODED[1]] {
                assert!(!text.contains(secret), "{variable}={url}: {text}");
            }
        }
    }
    // libpq's variables.
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("pg-server")
        .env_remove("TENURE_DATABASE_URL")
        .env_remove("TENURE_PG_URL")
        .env_remove("DATABASE_URL")
        .env("PGHOST", "127.0.0.1")
        .env("PGPASSWORD", SECRET)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("PG* variables"), "{text}");
    assert!(!text.contains(SECRET), "{text}");
}
