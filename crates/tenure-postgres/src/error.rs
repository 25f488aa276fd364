//! How a driver's failures become [`EventStorageError`]s, and how connection strings are kept
//! out of messages.
//!
//! Each driver says what went wrong as a [`Failure`] (the server's SQLSTATE, a broken
//! connection, a closed or exhausted pool); the mapping from there is this module's alone, so
//! that both drivers answer the same error for the same event. The rule: anything that leaves
//! the outcome of a call unknown (a lost connection, a server shutting down, a timeout, an
//! exhausted pool) is `Unavailable`; a missing table or function is `Schema`; anything else the
//! server refuses is `Internal`. No message ever contains a password: connection strings are
//! passed through `tenure_conninfo::redact` first, and the drivers' own errors never contain one.

use tenure_ports::{BoxError, EventStorageError};

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

    /// Whether the statement was refused before it ran because a plan prepared on this
    /// connection no longer matches the schema ("cached plan must not change result type",
    /// after the answer type or a function was re-created): nothing was done, and the same
    /// statement prepared anew can run.
    pub(crate) fn plan_invalidated(&self) -> bool {
        matches!(self, Failure::Server { code, message, .. }
            if code == "0A000" && message.contains("cached plan"))
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
        let (code, message, source) = match self {
            Failure::Server {
                code,
                message,
                source,
                ..
            } => (code, message, source),
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
        // insufficient_privilege: which object, and what the storage needs on it.
        if code == "42501" {
            return EventStorageError::schema_with(
                format!("{what}: {}", crate::schema::privileges::explain(&message)),
                source,
            );
        }
        // undefined_table, undefined_function, undefined_column
        if matches!(code.as_str(), "42P01" | "42883" | "42703") {
            return EventStorageError::schema_with(
                format!(
                    "{what}: {message}: the tables or functions are missing or outdated, or not \
                     visible to this role (it lacks USAGE on their schema); check with \
                     SchemaMode::Validate (see tenure_postgres::ddl and docs/postgres.md)"
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
}
