//! Says which PostgreSQL server the tests would use, and its version, as
//! [`tenure_pg_test::server`] finds it (passwords hidden): `cargo run -p tenure-pg-test`.

fn main() -> std::process::ExitCode {
    // `server` prints its line to stderr itself.
    match tenure_pg_test::server() {
        Ok(server) => {
            println!("{server:?}");
            std::process::ExitCode::SUCCESS
        }
        Err(_) => std::process::ExitCode::FAILURE,
    }
}
