//! Parsing both forms of a libpq connection string into one list of parameters.

use std::fmt;

/// A parsed connection string: libpq's parameters (`host`, `port`, `user`, `password`,
/// `dbname`, `sslmode`, `sslrootcert`, …) in the order given; a later one of the same name
/// wins, as in libpq.
///
/// Its `Debug` output hides the password; there is no `Display`, so that a connection string
/// is never printed by accident: print [`ConnInfo::redacted`].
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ConnInfo {
    params: Vec<(String, String)>,
}

/// Why a connection string could not be parsed. Its message never contains a password.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// A key/value string has a word without `=`, a key that is not a libpq keyword's shape,
    /// or an unterminated quote.
    KeyValue {
        /// Byte offset of the problem in the string.
        at: usize,
        /// What is wrong there.
        reason: &'static str,
    },
    /// A URL is malformed (bad percent-encoding, a bad host list, a fragment, …).
    Url {
        /// What is wrong.
        reason: &'static str,
    },
    /// `sslmode` has a value libpq does not know.
    SslMode {
        /// The value given.
        value: String,
    },
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::KeyValue { at, reason } => {
                write!(
                    f,
                    "invalid key/value connection string at byte {at}: {reason}"
                )
            }
            ParseError::Url { reason } => write!(f, "invalid connection URL: {reason}"),
            ParseError::SslMode { value } => write!(
                f,
                "invalid sslmode {value:?}: expected disable, allow, prefer, require, verify-ca \
                 or verify-full"
            ),
        }
    }
}

impl std::error::Error for ParseError {}

/// libpq's `sslmode`, with libpq's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SslMode {
    /// Plain text only.
    Disable,
    /// Plain text first; TLS if the server insists.
    Allow,
    /// TLS if the server offers it, else plain text (libpq's default).
    Prefer,
    /// TLS, without checking the server's certificate (unless a root certificate is given,
    /// in which case libpq checks it as `verify-ca` does).
    Require,
    /// TLS, with a server certificate signed by a trusted root.
    VerifyCa,
    /// TLS, with a trusted certificate whose name matches the host.
    VerifyFull,
}

impl SslMode {
    /// Parses libpq's spelling (`disable`, `allow`, `prefer`, `require`, `verify-ca`,
    /// `verify-full`).
    pub fn parse(value: &str) -> Result<SslMode, ParseError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(ParseError::SslMode {
                    value: other.to_owned(),
                });
            }
        })
    }

    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ConnInfo {
    /// Parses a URL (`postgres://` or `postgresql://`) or a key/value string. The empty string
    /// is the empty key/value string: every parameter left to its default.
    pub fn parse(text: &str) -> Result<ConnInfo, ParseError> {
        match url_rest(text) {
            Some(rest) => parse_url(rest),
            None => parse_key_values(text),
        }
    }

    /// A connection string from parameters (later ones of the same name win).
    pub fn from_params<K: Into<String>, V: Into<String>>(
        params: impl IntoIterator<Item = (K, V)>,
    ) -> ConnInfo {
        ConnInfo {
            params: params
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of parameter `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` to `value` (replacing any value it had).
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        self.params.retain(|(k, _)| k != key);
        self.params.push((key.to_owned(), value.into()));
    }

    /// Removes parameter `key`; returns its value, if it had one.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let value = self.get(key).map(str::to_owned);
        self.params.retain(|(k, _)| k != key);
        value
    }

    /// Every parameter, in order (the last of each name is the one in force).
    pub fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// `host`: a host name, an IP address, a Unix-socket directory, or a comma-separated list.
    pub fn host(&self) -> Option<&str> {
        self.get("host")
    }

    /// `port` (or a comma-separated list, one per host).
    pub fn port(&self) -> Option<&str> {
        self.get("port")
    }

    /// `user`.
    pub fn user(&self) -> Option<&str> {
        self.get("user")
    }

    /// `password`.
    pub fn password(&self) -> Option<&str> {
        self.get("password")
    }

    /// `dbname`.
    pub fn dbname(&self) -> Option<&str> {
        self.get("dbname")
    }

    /// `sslmode`, libpq's default (`prefer`) when not given.
    pub fn ssl_mode(&self) -> Result<SslMode, ParseError> {
        self.get("sslmode")
            .map_or(Ok(SslMode::Prefer), SslMode::parse)
    }

    /// `sslrootcert`: a file of trusted root certificates (PEM), or `system`.
    pub fn ssl_root_cert(&self) -> Option<&str> {
        self.get("sslrootcert")
    }

    /// The parameters as a key/value string, every value quoted and escaped, password included:
    /// for handing to a driver, never for printing (print [`ConnInfo::redacted`]).
    pub fn to_key_value_string(&self) -> String {
        self.render(false)
    }

    /// The parameters as a key/value string with the password replaced by `***`.
    pub fn redacted(&self) -> String {
        self.render(true)
    }

    fn render(&self, redact: bool) -> String {
        let mut out = String::new();
        for (key, value) in self.effective() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(key);
            out.push('=');
            if redact && key == "password" {
                out.push_str("***");
                continue;
            }
            out.push('\'');
            for c in value.chars() {
                if c == '\'' || c == '\\' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('\'');
        }
        out
    }

    /// The parameters in force: the last of each name, in the order of first appearance.
    fn effective(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut seen: Vec<&str> = Vec::new();
        let mut keys = Vec::new();
        for (k, _) in &self.params {
            if !seen.contains(&k.as_str()) {
                seen.push(k);
                keys.push(k.as_str());
            }
        }
        keys.into_iter()
            .filter_map(move |k| self.get(k).map(|v| (k, v)))
    }
}

impl fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnInfo({})", self.redacted())
    }
}

/// The text after `postgres://` or `postgresql://` (any case), if `text` is such a URL.
pub(crate) fn url_rest(text: &str) -> Option<&str> {
    let (scheme, rest) = text.split_once("://")?;
    (scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql"))
        .then_some(rest)
}

fn parse_url(rest: &str) -> Result<ConnInfo, ParseError> {
    let url = |reason| ParseError::Url { reason };
    if rest.contains('#') {
        return Err(url(
            "a URL fragment (#…) is not allowed; percent-encode '#' as %23",
        ));
    }
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.split_once('/') {
        Some((authority, path)) => (authority, Some(path)),
        None => (before_query, None),
    };
    let mut info = ConnInfo::default();
    let hosts = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let (user, password) = match userinfo.split_once(':') {
                Some((user, password)) => (user, Some(password)),
                None => (userinfo, None),
            };
            if !user.is_empty() {
                info.set(
                    "user",
                    percent_decode(user).ok_or(url("bad percent-encoding in the user name"))?,
                );
            }
            if let Some(password) = password {
                info.set(
                    "password",
                    percent_decode(password).ok_or(url("bad percent-encoding in the password"))?,
                );
            }
            hosts
        }
        None => authority,
    };
    if !hosts.is_empty() {
        let (mut host_list, mut port_list) = (Vec::new(), Vec::new());
        for spec in hosts.split(',') {
            let (host, port) = split_host_port(spec).ok_or(url("a malformed host:port"))?;
            host_list.push(percent_decode(host).ok_or(url("bad percent-encoding in a host"))?);
            port_list.push(port.to_owned());
        }
        if host_list.iter().any(|h| !h.is_empty()) {
            info.set("host", host_list.join(","));
        }
        if port_list.iter().any(|p| !p.is_empty()) {
            if port_list
                .iter()
                .any(|p| !p.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(url("a port that is not a number"));
            }
            info.set("port", port_list.join(","));
        }
    }
    if let Some(path) = path.filter(|p| !p.is_empty()) {
        info.set(
            "dbname",
            percent_decode(path).ok_or(url("bad percent-encoding in the database name"))?,
        );
    }
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair
            .split_once('=')
            .ok_or(url("a query parameter without '='"))?;
        let key = percent_decode(key).ok_or(url("bad percent-encoding in a parameter name"))?;
        let value =
            percent_decode(value).ok_or(url("bad percent-encoding in a parameter value"))?;
        info.set(&key, value);
    }
    Ok(info)
}

/// `host[:port]` or `[v6]:port`; the port may be empty.
fn split_host_port(spec: &str) -> Option<(&str, &str)> {
    if let Some(v6) = spec.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        return match after {
            "" => Some((host, "")),
            port => Some((host, port.strip_prefix(':')?)),
        };
    }
    Some(spec.split_once(':').unwrap_or((spec, "")))
}

/// Decodes `%XX` escapes; `None` for a bad escape or bytes that are not UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn parse_key_values(text: &str) -> Result<ConnInfo, ParseError> {
    let mut info = ConnInfo::default();
    for pair in key_values(text) {
        let pair = pair?;
        info.set(pair.key, pair.value);
    }
    Ok(info)
}

/// One `key = value` of a key/value string.
pub(crate) struct KeyValue<'a> {
    pub(crate) key: &'a str,
    /// The value, unquoted and unescaped.
    pub(crate) value: String,
}

/// The pairs of a key/value string, as libpq reads them: whitespace-separated
/// `key = value`, the value either single-quoted (with `\'` and `\\`) or up to the next
/// whitespace (with `\` escaping the next character).
pub(crate) fn key_values(text: &str) -> impl Iterator<Item = Result<KeyValue<'_>, ParseError>> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let fail = |at, reason| Some(Err(ParseError::KeyValue { at, reason }));
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() {
            return None;
        }
        failed = true;
        let key_start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let key = &text[key_start..i];
        if key.is_empty() {
            return fail(key_start, "expected a parameter name");
        }
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if bytes.get(i) != Some(&b'=') {
            return fail(i, "expected '=' after a parameter name");
        }
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let value_start = i;
        let mut value = Vec::new();
        if bytes.get(i) == Some(&b'\'') {
            i += 1;
            loop {
                match bytes.get(i) {
                    None => return fail(value_start, "an unterminated quoted value"),
                    Some(b'\\') if i + 1 < bytes.len() => {
                        value.push(bytes[i + 1]);
                        i += 2;
                    }
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(&b) => {
                        value.push(b);
                        i += 1;
                    }
                }
            }
        } else {
            while i < bytes.len() && !bytes[i].is_ascii_whitespace() {
                if bytes[i] == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                }
                value.push(bytes[i]);
                i += 1;
            }
        }
        // Quotes and backslashes are ASCII, so the bytes between them are whole characters.
        let value = String::from_utf8_lossy(&value).into_owned();
        failed = false;
        Some(Ok(KeyValue { key, value }))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn params(text: &str) -> Vec<(String, String)> {
        let info = ConnInfo::parse(text).unwrap();
        info.effective()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn urls() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("postgres://", &[]),
            ("postgresql://h", &[("host", "h")]),
            (
                "postgres://u:p%40ss@h:5433/d%2Fb?sslmode=require&application_name=x%20y",
                &[
                    ("user", "u"),
                    ("password", "p@ss"),
                    ("host", "h"),
                    ("port", "5433"),
                    ("dbname", "d/b"),
                    ("sslmode", "require"),
                    ("application_name", "x y"),
                ],
            ),
            (
                "POSTGRES://u@h/db",
                &[("user", "u"), ("host", "h"), ("dbname", "db")],
            ),
            (
                "postgres://u:a@b@h/db",
                &[
                    ("user", "u"),
                    ("password", "a@b"),
                    ("host", "h"),
                    ("dbname", "db"),
                ],
            ),
            (
                "postgres://h1:1,h2:2/db",
                &[("host", "h1,h2"), ("port", "1,2"), ("dbname", "db")],
            ),
            (
                "postgres://[::1]:5432",
                &[("host", "::1"), ("port", "5432")],
            ),
            (
                "postgres://%2Fvar%2Frun%2Fpostgresql/db",
                &[("host", "/var/run/postgresql"), ("dbname", "db")],
            ),
            (
                "postgres:///db?host=/tmp&user=u&password=s",
                &[
                    ("dbname", "db"),
                    ("host", "/tmp"),
                    ("user", "u"),
                    ("password", "s"),
                ],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(params(text), pairs(expected), "{text}");
        }
    }

    #[test]
    fn bad_urls() {
        for text in [
            "postgres://h/db#frag",
            "postgres://u:p%4@h",
            "postgres://h:port",
            "postgres://h/db?novalue",
            "postgres://[::1",
            "postgres://u:%ff@h",
        ] {
            let err = ConnInfo::parse(text).unwrap_err();
            assert!(matches!(err, ParseError::Url { .. }), "{text}: {err:?}");
        }
    }

    #[test]
    fn key_value_strings() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("", &[]),
            (
                "  host=h   port = 5432 ",
                &[("host", "h"), ("port", "5432")],
            ),
            (
                "password='a b' user=u",
                &[("password", "a b"), ("user", "u")],
            ),
            (r"password='it\'s \\ ok'", &[("password", r"it's \ ok")]),
            (r"password=a\ b", &[("password", "a b")]),
            ("password=''", &[("password", "")]),
            ("host=a host=b", &[("host", "b")]),
            ("dbname='Grüße'", &[("dbname", "Grüße")]),
        ];
        for (text, expected) in cases {
            assert_eq!(params(text), pairs(expected), "{text}");
        }
        for (text, at) in [
            ("host", 4),
            ("=h", 0),
            ("password='open", 9),
            ("host=h !x=1", 7),
        ] {
            match ConnInfo::parse(text) {
                Err(ParseError::KeyValue { at: got, .. }) => assert_eq!(got, at, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn rendering_round_trips_and_hides_the_password() {
        for text in [
            "postgres://u:p%27q@h:1/db?sslmode=verify-full&sslrootcert=/a%20b/ca.pem",
            r"host=h password='x\\y\'z' user=u",
        ] {
            let info = ConnInfo::parse(text).unwrap();
            let again = ConnInfo::parse(&info.to_key_value_string()).unwrap();
            assert_eq!(
                params(&again.to_key_value_string()),
                params(&info.to_key_value_string())
            );
            assert_eq!(again.password(), info.password());
            let shown = format!("{} {info:?}", info.redacted());
            assert!(shown.contains("password=***"), "{shown}");
            assert!(!shown.contains(info.password().unwrap()), "{shown}");
        }
    }

    #[test]
    fn ssl_modes() {
        assert_eq!(ConnInfo::parse("").unwrap().ssl_mode(), Ok(SslMode::Prefer));
        for mode in [
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ] {
            let info = ConnInfo::parse(&format!("sslmode={mode}")).unwrap();
            assert_eq!(info.ssl_mode().unwrap().as_str(), mode);
        }
        let err = ConnInfo::parse("sslmode=verify")
            .unwrap()
            .ssl_mode()
            .unwrap_err();
        assert!(err.to_string().contains("verify-full"), "{err}");
    }
}
