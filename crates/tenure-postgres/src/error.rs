//! How a driver's failures become [`EventStorageError`]s, and how connection strings are kept
//! out of messages.
//!
//! Each driver says what went wrong as a [`Failure`] (the server's SQLSTATE, a broken
//! connection, a closed or exhausted pool); the mapping from there is this module's alone, so
//! that both drivers answer the same error for the same event. The rule: anything that leaves
//! the outcome of a call unknown (a lost connection, a server shutting down, a timeout, an
//! exhausted pool) is `Unavailable`; a missing table or function is `Schema`; anything else the
//! server refuses is `Internal`. No message ever contains a password: connection strings are
//! passed through `redact` first, and the drivers' own errors never contain one.

use tenure_ports::{BoxError, EventStorageError};

use crate::redact::{find_password_key, skip_value};

/// The SQLSTATE raised by the lease functions when a lease's fencing tokens are exhausted.
const TOKENS_EXHAUSTED: &str = "TN001";

/// What a driver reports when a statement, or getting a connection, failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server refused the statement with an SQLSTATE.
    Server {
        /// The five-character SQLSTATE.
        code: String,
        /// The constraint the error names, if any.
        constraint: Option<String>,
        /// The server's message.
        message: String,
        /// The driver's error.
        source: BoxError,
    },
    /// No answer: the connection broke, or could not be made.
    Connection(BoxError),
    /// The pool was closed.
    PoolClosed,
    /// No connection within the pool's wait (what timed out, for the message).
    PoolTimeout(String),
    /// The pool could not give a connection for another reason.
    #[cfg_attr(not(feature = "deadpool"), allow(dead_code))]
    Pool(BoxError),
    /// The driver could not encode or decode a value, or lost track of a connection: a bug.
    Driver(BoxError),
}

impl Failure {
    /// Whether the connection itself is gone (or going): it must not be reused.
    pub(crate) fn connection_broken(&self) -> bool {
        match self {
            Failure::Connection(_) => true,
            Failure::Server { code, .. } => {
                code.starts_with("08")
                    // admin_shutdown, crash_shutdown, cannot_connect_now
                    || matches!(code.as_str(), "57P01" | "57P02" | "57P03")
            }
            Failure::PoolClosed | Failure::PoolTimeout(_) | Failure::Pool(_) => false,
            Failure::Driver(_) => false,
        }
    }

    /// Whether the server refused the statement for violating `constraint`'s uniqueness.
    pub(crate) fn is_unique_violation_of(&self, name: &str) -> bool {
        matches!(self, Failure::Server { code, constraint: Some(c), .. }
            if code == "23505" && c == name)
    }

    /// The SQLSTATE and the server's message, if the server refused the statement.
    pub(crate) fn server_message(&self) -> Option<(&str, &str)> {
        match self {
            Failure::Server { code, message, .. } => Some((code, message)),
            _ => None,
        }
    }

    /// The error a call doing `what` reports.
    pub(crate) fn into_storage(self, what: &str) -> EventStorageError {
        let (code, source) = match self {
            Failure::Server { code, source, .. } => (code, source),
            Failure::Connection(err) => {
                return EventStorageError::unavailable_with(
                    format!("{what}: the connection to PostgreSQL failed; the outcome is unknown"),
                    err,
                );
            }
            Failure::PoolClosed => return EventStorageError::Closed,
            Failure::PoolTimeout(kind) => {
                return EventStorageError::unavailable(format!(
                    "{what}: no connection to PostgreSQL in time ({kind})"
                ));
            }
            Failure::Pool(err) => {
                return EventStorageError::unavailable_with(
                    format!("{what}: no connection to PostgreSQL"),
                    err,
                );
            }
            Failure::Driver(err) => {
                return EventStorageError::internal_with(format!("{what}: the driver failed"), err);
            }
        };
        if code == TOKENS_EXHAUSTED {
            return EventStorageError::internal_with(
                format!("{what}: the lease's fencing tokens are exhausted"),
                source,
            );
        }
        // undefined_table, undefined_function, undefined_column, insufficient_privilege
        if matches!(code.as_str(), "42P01" | "42883" | "42703" | "42501") {
            return EventStorageError::schema_with(
                format!(
                    "{what}: the tables or functions are missing, outdated, or not granted to \
                     this role (see tenure_postgres::ddl and docs/postgres.md)"
                ),
                source,
            );
        }
        match code.get(..2).unwrap_or_default() {
            // The server refused the login (unknown role, wrong password, no such database):
            // the storage cannot be reached with this configuration.
            "28" | "3D" => EventStorageError::unavailable_with(
                format!("{what}: PostgreSQL refused the connection"),
                source,
            ),
            // connection exception, insufficient resources, operator intervention (shutdown,
            // cancel, terminate), transaction rollback (serialization, deadlock), system error,
            // lock not available: nothing is confirmed, and trying again later may work.
            "08" | "53" | "57" | "40" | "58" | "55" => EventStorageError::unavailable_with(
                format!("{what}: PostgreSQL did not complete the call; the outcome is unknown"),
                source,
            ),
            _ => EventStorageError::internal_with(
                format!("{what}: PostgreSQL refused the call"),
                source,
            ),
        }
    }
}

/// `text` without the password `url` carries, if any (for driver messages about a bad URL).
pub(crate) fn scrub(text: &str, url: &str) -> String {
    scrub_secret(text, password_of(url).as_deref())
}

/// Removes every occurrence of `secret` from `text`.
fn scrub_secret(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if !secret.is_empty() => text.replace(secret, "***"),
        _ => text.to_owned(),
    }
}

/// The password a connection string carries, if any: a URL's userinfo or `password`
/// parameter, or a key/value string's `password`, as written.
fn password_of(url: &str) -> Option<String> {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some(at) = authority.rfind('@')
            && let Some((_, password)) = authority[..at].split_once(':')
        {
            return Some(password.to_owned());
        }
        let (_, query) = rest[authority_end..].split_once('?')?;
        return query.split('&').find_map(|kv| {
            kv.split_once('=')
                .filter(|(k, _)| k.eq_ignore_ascii_case("password"))
                .map(|(_, v)| v.to_owned())
        });
    }
    let at = find_password_key(url)?;
    let after = &url[at..];
    let value = after[after.find('=')? + 1..].trim_start();
    let end = value.len() - skip_value(value).len();
    let value = &value[..end];
    Some(match value.strip_prefix('\'') {
        Some(quoted) => {
            let quoted = quoted.strip_suffix('\'').unwrap_or(quoted);
            quoted.replace("\\'", "'").replace("\\\\", "\\")
        }
        None => value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> Failure {
        Failure::Server {
            code: code.into(),
            constraint: Some("k".into()),
            message: "m".into(),
            source: "driver error".into(),
        }
    }

    #[test]
    fn failures_map_by_what_they_leave_unknown() {
        use EventStorageError as E;
        type Expected = fn(&E) -> bool;
        let cases: [(Failure, Expected); 10] = [
            (server("TN001"), |e| matches!(e, E::Internal { .. })),
            (server("42P01"), |e| matches!(e, E::Schema { .. })),
            (server("42501"), |e| matches!(e, E::Schema { .. })),
            (server("28P01"), |e| matches!(e, E::Unavailable { .. })),
            (server("57P01"), |e| matches!(e, E::Unavailable { .. })),
            (server("40001"), |e| matches!(e, E::Unavailable { .. })),
            (server("22001"), |e| matches!(e, E::Internal { .. })),
            (Failure::Connection("reset".into()), |e| {
                matches!(e, E::Unavailable { .. })
            }),
            (Failure::PoolClosed, |e| matches!(e, E::Closed)),
            (Failure::PoolTimeout("wait".into()), |e| {
                matches!(e, E::Unavailable { .. })
            }),
        ];
        for (failure, expected) in cases {
            let text = format!("{failure:?}");
            let err = failure.into_storage("call");
            assert!(expected(&err), "{text} -> {err:?}");
        }
        assert!(server("57P01").connection_broken());
        assert!(server("08006").connection_broken());
        assert!(!server("40001").connection_broken());
        assert!(Failure::Connection("x".into()).connection_broken());
        assert!(server("23505").is_unique_violation_of("k"));
        assert!(!server("23505").is_unique_violation_of("j"));
        assert!(!server("23503").is_unique_violation_of("k"));
    }

    #[test]
    fn scrub_removes_every_occurrence() {
        assert_eq!(
            scrub_secret("a secret b secret", Some("secret")),
            "a *** b ***"
        );
        assert_eq!(scrub_secret("abc", Some("")), "abc");
        assert_eq!(scrub_secret("abc", None), "abc");
        assert_eq!(scrub("bad pw here", "postgres://u:pw@h/db"), "bad *** here");
    }

    #[test]
    fn finds_passwords_to_scrub() {
        assert_eq!(password_of("postgres://u:pw@h/db").as_deref(), Some("pw"));
        assert_eq!(password_of("host=h password=pw").as_deref(), Some("pw"));
        assert_eq!(
            password_of("host=h password = 'a b\\'c' user=u").as_deref(),
            Some("a b'c")
        );
        assert_eq!(
            password_of("postgres://u:pw@h:notaport/db").as_deref(),
            Some("pw")
        );
        assert_eq!(
            password_of("postgres://h/db?user=u&password=pw").as_deref(),
            Some("pw")
        );
        assert_eq!(password_of("postgres://u@h/db"), None);
        assert_eq!(password_of("host=h"), None);
    }
}
