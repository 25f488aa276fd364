//! How driver and pool failures become [`EventStorageError`]s, and how connection strings are
//! kept out of messages.
//!
//! The rule: anything that leaves the outcome of a call unknown (a lost connection, a server
//! shutting down, a timeout, an exhausted pool) is `Unavailable`; a missing table or function
//! is `Schema`; anything else the server refuses is `Internal`. No message ever contains a
//! password: connection strings are passed through [`redact`] first, and the driver's own
//! errors never contain one.

use deadpool_postgres::PoolError;
use tenure_ports::EventStorageError;
use tokio_postgres::error::SqlState;

/// The SQLSTATE raised by the lease functions when a lease's fencing tokens are exhausted.
const TOKENS_EXHAUSTED: &str = "TN001";

/// Maps a driver error met while doing `what`.
pub(crate) fn from_pg(what: &str, err: tokio_postgres::Error) -> EventStorageError {
    let Some(code) = err.code() else {
        // No SQLSTATE: the connection broke, or the client could not talk to the server.
        return EventStorageError::unavailable_with(
            format!("{what}: the connection to PostgreSQL failed; the outcome is unknown"),
            err,
        );
    };
    let class = &code.code()[..2.min(code.code().len())];
    if code.code() == TOKENS_EXHAUSTED {
        return EventStorageError::internal_with(
            format!("{what}: the lease's fencing tokens are exhausted"),
            err,
        );
    }
    if *code == SqlState::UNDEFINED_TABLE
        || *code == SqlState::UNDEFINED_FUNCTION
        || *code == SqlState::UNDEFINED_COLUMN
        || *code == SqlState::INSUFFICIENT_PRIVILEGE
    {
        return EventStorageError::schema_with(
            format!(
                "{what}: the tables or functions are missing, outdated, or not granted to this \
                 role (see tenure_postgres::ddl and docs/postgres.md)"
            ),
            err,
        );
    }
    match class {
        // The server refused the login (unknown role, wrong password, no such database): the
        // storage cannot be reached with this configuration.
        "28" | "3D" => EventStorageError::unavailable_with(
            format!("{what}: PostgreSQL refused the connection"),
            err,
        ),
        // connection exception, insufficient resources, operator intervention (shutdown,
        // cancel, terminate), transaction rollback (serialization, deadlock), system error,
        // lock not available: nothing is confirmed, and trying again later may work.
        "08" | "53" | "57" | "40" | "58" | "55" => EventStorageError::unavailable_with(
            format!("{what}: PostgreSQL did not complete the call; the outcome is unknown"),
            err,
        ),
        _ => EventStorageError::internal_with(format!("{what}: PostgreSQL refused the call"), err),
    }
}

/// Whether `err` means the connection itself is gone (or going): it must not be reused.
pub(crate) fn connection_broken(err: &tokio_postgres::Error) -> bool {
    err.is_closed()
        || match err.code() {
            None => true,
            Some(code) => {
                code.code().starts_with("08")
                    || *code == SqlState::ADMIN_SHUTDOWN
                    || *code == SqlState::CRASH_SHUTDOWN
                    || *code == SqlState::CANNOT_CONNECT_NOW
            }
        }
}

/// Maps a failure to get a connection from the pool.
pub(crate) fn from_pool(what: &str, err: PoolError) -> EventStorageError {
    match err {
        PoolError::Closed => EventStorageError::Closed,
        PoolError::Backend(err) => from_pg(what, err),
        PoolError::Timeout(kind) => EventStorageError::unavailable(format!(
            "{what}: no connection to PostgreSQL in time ({kind:?})"
        )),
        other => EventStorageError::unavailable_with(
            format!("{what}: no connection to PostgreSQL"),
            other.to_string(),
        ),
    }
}

/// `url` with its password, if any, replaced by `***`, for messages and logs.
///
/// Understands URLs (`postgres://user:secret@host/db`) and key/value strings
/// (`host=h password=secret`, quoted values included).
///
/// ```
/// use tenure_postgres::redact;
/// assert_eq!(redact("postgres://app:s3cret@db:5432/x"), "postgres://app:***@db:5432/x");
/// assert_eq!(redact("host=db password='a b' user=app"), "host=db password=*** user=app");
/// ```
pub fn redact(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest_start = scheme_end + 3;
        let rest = &url[rest_start..];
        // The authority ends at the first '/', '?' or '#'; the userinfo at its last '@'.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let mut out = String::with_capacity(url.len());
        out.push_str(&url[..rest_start]);
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        out.push_str(&redact_query(&rest[authority_end..]));
        return out;
    }
    redact_key_values(url)
}

/// Redacts a `password=` parameter in a URL's query string.
fn redact_query(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_owned();
    };
    let (path, query) = tail.split_at(q + 1);
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{path}{}", parts.join("&"))
}

/// Redacts `password=...` in a libpq key/value string.
fn redact_key_values(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = find_password_key(rest) {
        let (before, after) = rest.split_at(pos);
        out.push_str(before);
        // after = "password <ws>= <ws> value ..."
        let eq = after.find('=').unwrap_or(after.len());
        out.push_str("password=***");
        let value = after.get(eq + 1..).unwrap_or("").trim_start();
        rest = skip_value(value);
    }
    out.push_str(rest);
    out
}

fn find_password_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let at = from + i;
        let starts_word = at == 0 || lower.as_bytes()[at - 1].is_ascii_whitespace();
        let after = lower[at + "password".len()..].trim_start();
        if starts_word && after.starts_with('=') {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

/// The text after a key/value value (quoted with `'` and `\` escapes, or up to whitespace).
fn skip_value(value: &str) -> &str {
    if let Some(quoted) = value.strip_prefix('\'') {
        let mut escaped = false;
        for (i, c) in quoted.char_indices() {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '\'') => return &quoted[i + 1..],
                _ => {}
            }
        }
        ""
    } else {
        let end = value.find(char::is_whitespace).unwrap_or(value.len());
        &value[end..]
    }
}

/// Removes every occurrence of `secret` from `text` (for driver messages about a bad URL).
pub(crate) fn scrub(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(secret) if !secret.is_empty() => text.replace(secret, "***"),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_password() {
        let cases = [
            ("postgres://u:p@h/db", "postgres://u:***@h/db"),
            (
                "postgresql://u:p%40ss@h:1/db?x=1",
                "postgresql://u:***@h:1/db?x=1",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://h/db", "postgres://h/db"),
            ("postgres://u:p@h", "postgres://u:***@h"),
            ("postgres://u:a@b@h/db", "postgres://u:***@h/db"),
            (
                "postgres://h/db?user=u&password=secret&x=1",
                "postgres://h/db?user=u&password=***&x=1",
            ),
            (
                "host=h password=secret user=u",
                "host=h password=*** user=u",
            ),
            (
                "host=h password = 'se cret\\' x' user=u",
                "host=h password=*** user=u",
            ),
            ("PASSWORD=secret", "password=***"),
            ("host=h mypassword=notakey", "host=h mypassword=notakey"),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "{input}");
        }
    }

    #[test]
    fn scrub_removes_every_occurrence() {
        assert_eq!(scrub("a secret b secret", Some("secret")), "a *** b ***");
        assert_eq!(scrub("abc", Some("")), "abc");
        assert_eq!(scrub("abc", None), "abc");
    }
}
