//! From a [`ConnInfo`] (the one parsed form of a connection string, `tenure-conninfo`) to each
//! driver's own configuration, so that both drivers read the same string the same way.
//!
//! libpq's TLS parameters (`sslmode` with all six values, `sslrootcert`) are not understood by
//! tokio-postgres, so they are taken out here and applied by [`super::tls`].

use tenure_conninfo::ConnInfo;

/// The parameters applied by this crate rather than handed to a driver's own parser.
#[cfg(feature = "deadpool")]
const APPLIED_HERE: &[&str] = &["sslmode", "sslrootcert"];

/// Why a connection string cannot be used, with its secrets hidden.
fn invalid(reason: impl std::fmt::Display, info: &ConnInfo) -> String {
    tenure_conninfo::scrub(&reason.to_string(), &info.to_key_value_string())
}

/// The tokio-postgres configuration for `info`, without TLS (see [`super::tls`]). Unless the
/// string sets them, `application_name` is `tenure` and connecting is bounded by `timeout`.
#[cfg(feature = "deadpool")]
pub(crate) fn tokio_config(
    info: &ConnInfo,
    timeout: std::time::Duration,
) -> Result<tokio_postgres::Config, String> {
    use std::str::FromStr as _;
    let rest = ConnInfo::from_params(info.params().filter(|(k, _)| !APPLIED_HERE.contains(k)));
    let mut config = tokio_postgres::Config::from_str(&rest.to_key_value_string())
        .map_err(|e| invalid(e, info))?;
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        config.host(default_host());
    }
    if config.get_user().is_none()
        && let Some(user) = std::env::var("USER").ok().filter(|u| !u.is_empty())
    {
        config.user(user);
    }
    if config.get_application_name().is_none() {
        config.application_name("tenure");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(timeout);
    }
    Ok(config)
}

/// The sqlx connect options for `info`, TLS included (sqlx applies `sslmode` and `sslrootcert`
/// itself, with libpq's meaning; `docs/postgres.md`, "Connecting"): what the storage's sqlx
/// pool connects with, for any other sqlx connection (a `PgListener`, say) to follow the same
/// settings. Unless the string sets it, `application_name` is `tenure`.
#[cfg(feature = "sqlx-0_9")]
pub fn sqlx_connect_options(
    info: &ConnInfo,
) -> Result<sqlx::postgres::PgConnectOptions, crate::BuildError> {
    sqlx_options(info).map_err(|reason| crate::BuildError::Url {
        url: info.redacted(),
        reason,
    })
}

/// [`sqlx_connect_options`], with the reason of a failure as text.
#[cfg(feature = "sqlx-0_9")]
pub(crate) fn sqlx_options(info: &ConnInfo) -> Result<sqlx::postgres::PgConnectOptions, String> {
    use sqlx::postgres::{PgConnectOptions, PgSslMode};
    let mut options = PgConnectOptions::new_without_pgpass();
    let mut host_set = false;
    for (key, value) in effective(info) {
        options = match key {
            "host" | "hostaddr" if value.contains(',') => {
                return Err(format!(
                    "the sqlx driver connects to one host only, not {value:?} (use the deadpool \
                     driver for a list of hosts)"
                ));
            }
            "host" => {
                host_set = true;
                options.host(value)
            }
            "hostaddr" if !host_set => options.host(value),
            "hostaddr" => options,
            "port" => options.port(
                value
                    .parse()
                    .map_err(|_| format!("invalid port {value:?}"))?,
            ),
            "user" => options.username(value),
            "password" => options.password(value),
            "dbname" => options.database(value),
            "application_name" => options.application_name(value),
            "sslrootcert" => options.ssl_root_cert(value),
            "sslmode" => options.ssl_mode(match value {
                "disable" => PgSslMode::Disable,
                "allow" => PgSslMode::Allow,
                "prefer" => PgSslMode::Prefer,
                "require" => PgSslMode::Require,
                "verify-ca" => PgSslMode::VerifyCa,
                "verify-full" => PgSslMode::VerifyFull,
                other => return Err(format!("invalid sslmode {other:?}")),
            }),
            "options" => options.options(parse_options(value)),
            // Bounded by the pool's own timeouts.
            "connect_timeout" => options,
            other => {
                return Err(invalid(
                    format!("the sqlx driver does not support the connection parameter {other:?}"),
                    info,
                ));
            }
        };
    }
    if info.get("application_name").is_none() {
        options = options.application_name("tenure");
    }
    Ok(options)
}

/// The parameters in force: the last of each name.
#[cfg(feature = "sqlx-0_9")]
fn effective(info: &ConnInfo) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for (key, value) in info.params() {
        out.retain(|(k, _)| *k != key);
        out.push((key, value));
    }
    out
}

/// libpq's `options` (`-c name=value -c …`) as the pairs sqlx sets.
#[cfg(feature = "sqlx-0_9")]
fn parse_options(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        let setting = match word.strip_prefix("-c") {
            Some("") => words.next().unwrap_or_default(),
            Some(rest) => rest,
            None => word.strip_prefix("--").unwrap_or(word),
        };
        if let Some((name, value)) = setting.split_once('=') {
            pairs.push((name.to_owned(), value.to_owned()));
        }
    }
    pairs
}

/// libpq's default host: its Unix socket directory if there is one, else `localhost`.
#[cfg(feature = "deadpool")]
fn default_host() -> &'static str {
    if std::path::Path::new("/var/run/postgresql").is_dir() {
        "/var/run/postgresql"
    } else {
        "localhost"
    }
}
