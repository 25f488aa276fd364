//! Hiding the secrets of a connection string: the one redactor every part of Tenure uses.
//!
//! It works on the text as written, and never fails: a string that does not parse still has
//! its secrets hidden (more of it is hidden when its shape is unclear, never less).

use std::ops::Range;

use crate::parse::percent_decode;

/// `text` (a URL or a key/value connection string) with every password replaced by `***`:
/// a URL's user-info password, a `password=` query parameter (its name percent-encoded or
/// not), a key/value `password` quoted or not. Everything else is kept as written.
///
/// ```
/// use tenure_conninfo::redact;
/// assert_eq!(redact("postgres://app:s3cret@db:5432/x"), "postgres://app:***@db:5432/x");
/// assert_eq!(redact("postgres://db/x?user=app&password=s3cret"), "postgres://db/x?user=app&password=***");
/// assert_eq!(redact("host=db password='a b' user=app"), "host=db password=*** user=app");
/// ```
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for span in secret_spans(text) {
        out.push_str(&text[from..span.start]);
        out.push_str("***");
        from = span.end;
    }
    out.push_str(&text[from..]);
    out
}

/// Every form in which the secrets of `conninfo` may appear in other text: each password as
/// written, percent-decoded, and unquoted/unescaped. Empty ones are left out; longest first.
pub fn secrets(conninfo: &str) -> Vec<String> {
    let mut found = Vec::new();
    for span in secret_spans(conninfo) {
        let raw = &conninfo[span];
        let mut forms = vec![raw.to_owned()];
        if let Some(decoded) = percent_decode(raw) {
            forms.push(decoded);
        }
        if let Some(quoted) = raw.strip_prefix('\'') {
            let inner = quoted.strip_suffix('\'').unwrap_or(quoted);
            forms.push(inner.to_owned());
            forms.push(unescape(inner));
        } else if raw.contains('\\') {
            forms.push(unescape(raw));
        }
        for form in forms {
            if !form.is_empty() && !found.contains(&form) {
                found.push(form);
            }
        }
    }
    found.sort_by_key(|s| std::cmp::Reverse(s.len()));
    found
}

/// `text` (a driver's message, a log line) with every secret of `conninfo` replaced by `***`.
///
/// ```
/// use tenure_conninfo::scrub;
/// let url = "postgres://app:p%40ss@db/x";
/// assert_eq!(scrub("auth failed for p@ss (p%40ss)", url), "auth failed for *** (***)");
/// ```
pub fn scrub(text: &str, conninfo: &str) -> String {
    secrets(conninfo)
        .iter()
        .fold(text.to_owned(), |text, secret| {
            text.replace(secret.as_str(), "***")
        })
}

/// The byte ranges of the secret values in `text`, in order, not overlapping.
fn secret_spans(text: &str) -> Vec<Range<usize>> {
    match text.find("://") {
        Some(scheme_end) => url_spans(text, scheme_end + 3),
        None => key_value_spans(text),
    }
}

fn url_spans(text: &str, rest_start: usize) -> Vec<Range<usize>> {
    let rest = &text[rest_start..];
    let mut spans = Vec::new();
    let query_at = rest.find('?').unwrap_or(rest.len());
    // The user info ends at the last '@' before the query. A '@' only after a '?' may mean
    // that the password itself holds a '?' (not valid, but it must not leak): then everything
    // from the first ':' to the last '@' is hidden, and the query is still read from its first
    // '?', so a hidden stretch may cover part of it.
    let (at, query_from) = match rest[..query_at].rfind('@') {
        Some(at) => (
            Some(at),
            at + rest[at..].find('?').unwrap_or(rest.len() - at),
        ),
        None => (rest.rfind('@'), query_at),
    };
    if let Some(at) = at
        && let Some(colon) = rest[..at].find(':')
        && colon + 1 < at
    {
        spans.push(rest_start + colon + 1..rest_start + at);
    }
    if query_from < rest.len() {
        let mut offset = rest_start + query_from + 1;
        for pair in text[offset..].split(['&', '#']) {
            if let Some((key, value)) = pair.split_once('=') {
                let key = percent_decode(key).unwrap_or_else(|| key.to_owned());
                if key.eq_ignore_ascii_case("password") && !value.is_empty() {
                    let start = offset + pair.len() - value.len();
                    spans.push(start..start + value.len());
                }
            }
            offset += pair.len() + 1;
        }
    }
    merge(spans)
}

/// Sorted, with overlapping ranges joined.
fn merge(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.sort_by_key(|span| span.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// The values of every `password` key in a key/value string, read as libpq reads values
/// (quoted with `\` escapes, or up to whitespace). An unterminated quote hides the rest.
fn key_value_spans(text: &str) -> Vec<Range<usize>> {
    let lower = text.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = lower[from..].find("password") {
        let key = from + found;
        from = key + "password".len();
        let starts_word = key == 0 || bytes[key - 1].is_ascii_whitespace();
        let mut i = from;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if !starts_word || bytes.get(i) != Some(&b'=') {
            continue;
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        let end = value_end(bytes, start);
        if end > start {
            spans.push(start..end);
        }
        from = end.max(from);
    }
    spans
}

/// Where a key/value value that starts at `start` ends.
fn value_end(bytes: &[u8], start: usize) -> usize {
    let mut i = start;
    if bytes.get(i) == Some(&b'\'') {
        i += 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'\'' => return i + 1,
                _ => i += 1,
            }
        }
        return bytes.len();
    }
    while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
        i += if bytes[i] == b'\\' { 2 } else { 1 };
    }
    i.min(bytes.len())
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every form a password can take in a connection string, with what must be shown and the
    /// secrets that must be found. This table is the redactor's specification.
    const CASES: &[(&str, &str, &[&str])] = &[
        // URL user info.
        ("postgres://u:p@h/db", "postgres://u:***@h/db", &["p"]),
        (
            "postgresql://u:p%40ss@h:1/db?x=1",
            "postgresql://u:***@h:1/db?x=1",
            &["p%40ss", "p@ss"],
        ),
        ("postgres://u:a@b@h/db", "postgres://u:***@h/db", &["a@b"]),
        (
            "postgres://u:pa/ss@h/db",
            "postgres://u:***@h/db",
            &["pa/ss"],
        ),
        (
            "postgres://u:pa?ss@h/db",
            "postgres://u:***@h/db",
            &["pa?ss"],
        ),
        ("postgres://u:p@h", "postgres://u:***@h", &["p"]),
        ("postgres://u:@h/db", "postgres://u:@h/db", &[]),
        ("postgres://u@h/db", "postgres://u@h/db", &[]),
        ("postgres://h/db", "postgres://h/db", &[]),
        ("POSTGRES://U:Secret@H", "POSTGRES://U:***@H", &["Secret"]),
        // URL query.
        (
            "postgres://h/db?user=u&password=secret&x=1",
            "postgres://h/db?user=u&password=***&x=1",
            &["secret"],
        ),
        (
            "postgres://h/db?PASSWORD=s%20t",
            "postgres://h/db?PASSWORD=***",
            &["s%20t", "s t"],
        ),
        (
            "postgres://h/db?pass%77ord=secret",
            "postgres://h/db?pass%77ord=***",
            &["secret"],
        ),
        (
            "postgres://u:one@h/db?password=two",
            "postgres://u:***@h/db?password=***",
            &["one", "two"],
        ),
        (
            "postgres://h/db?application_name=a@b",
            "postgres://h/db?application_name=a@b",
            &[],
        ),
        (
            "postgres://h/db?application_name=a@b&password=x",
            "postgres://h/db?application_name=a@b&password=***",
            &["x"],
        ),
        (
            "postgres://h:5432/db?application_name=a@b&password=x",
            "postgres://h:***@b&password=***",
            &["5432/db?application_name=a", "x"],
        ),
        // Key/value strings.
        (
            "host=h password=secret user=u",
            "host=h password=*** user=u",
            &["secret"],
        ),
        (
            r"host=h password = 'se cret\' x' user=u",
            "host=h password = *** user=u",
            &[r"'se cret\' x'", r"se cret\' x", "se cret' x"],
        ),
        ("PASSWORD=secret", "PASSWORD=***", &["secret"]),
        (r"password=a\ b", "password=***", &[r"a\ b", "a b"]),
        (
            "password='unterminated and more",
            "password=***",
            &["'unterminated and more", "unterminated and more"],
        ),
        ("password=", "password=", &[]),
        (
            "host=h mypassword=notakey",
            "host=h mypassword=notakey",
            &[],
        ),
        (
            "password=one password=two",
            "password=*** password=***",
            &["one", "two"],
        ),
        ("user=password host=h", "user=password host=h", &[]),
    ];

    #[test]
    fn the_table() {
        for (input, shown, expected) in CASES {
            assert_eq!(redact(input), *shown, "{input}");
            let mut found = secrets(input);
            found.sort();
            let mut expected: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
            expected.sort();
            assert_eq!(found, expected, "{input}");
        }
    }

    #[test]
    fn scrubbing_removes_every_form() {
        let url = "postgres://u:p%40ss@h/db?password=q%20r";
        assert_eq!(
            scrub("p@ss p%40ss q r q%20r other", url),
            "*** *** *** *** other"
        );
        assert_eq!(scrub("nothing", "postgres://h/db"), "nothing");
    }

    #[test]
    fn never_panics_on_odd_input() {
        for text in [
            "",
            "://",
            "a://@",
            "postgres://:@",
            "password",
            "password='",
            "password=\\",
            "ü password=ö",
            "postgres://u:p@h?password",
            "postgres://%zz:%zz@h?%zz=%zz",
        ] {
            let _ = redact(text);
            let _ = secrets(text);
        }
    }
}
