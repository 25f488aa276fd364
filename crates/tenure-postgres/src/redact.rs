//! Connection strings with their password replaced, for messages and logs.

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

pub(crate) fn find_password_key(s: &str) -> Option<usize> {
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
pub(crate) fn skip_value(value: &str) -> &str {
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
}
