//! The `tenure` command run in an environment of the test's own: no variable that could name
//! a server (or a log filter) is inherited from the machine, only those the test gives.

use std::process::{Command, Output};

/// Every variable that can name a server or its TLS settings.
pub const NAMING: &[&str] = &[
    "TENURE_DATABASE_URL",
    "DATABASE_URL",
    "TENURE_PG_URL",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGPASSFILE",
];

/// Runs `tenure args` with only `env` of [`NAMING`] set; its output, and stdout then stderr
/// as one text.
pub fn tenure(args: &[&str], env: &[(&str, &str)]) -> (Output, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenure"));
    command.args(args).env_remove("RUST_LOG");
    for name in NAMING {
        command.env_remove(name);
    }
    let output = command
        .envs(env.iter().copied())
        .output()
        .expect("running the tenure binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output, text)
}
