//! Finding the server to use: an explicit string, the URL variables, libpq's variables.

use std::fmt;
use std::path::PathBuf;

use crate::parse::{ConnInfo, ParseError};
use crate::redact::redact;

/// The variables that hold a whole connection string, in the order [`resolve`] tries them.
pub const URL_VARIABLES: &[&str] = &["TENURE_DATABASE_URL", "DATABASE_URL"];

/// The variables that name the server of Tenure's own test suite (`tenure-pg-test`, `cargo
/// xtask`), in order: [`URL_VARIABLES`] with `TENURE_PG_URL`, the suite's former variable
/// (deprecated, still read), right after `TENURE_DATABASE_URL`.
pub const TEST_URL_VARIABLES: &[&str] = &["TENURE_DATABASE_URL", "TENURE_PG_URL", "DATABASE_URL"];

/// The libpq variables that, alone, name a server (see [`LIBPQ_VARIABLES`]).
pub const NAMING_VARIABLES: &[&str] = NAMING;

/// libpq's variables and the parameter each sets, as [`resolve`] reads them: they name a
/// server when nothing else does (any of `PGHOST`, `PGHOSTADDR`, `PGPORT`, `PGUSER`,
/// `PGDATABASE` set), and otherwise fill in what the chosen string leaves out, as psql does.
pub const LIBPQ_VARIABLES: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGDATABASE", "dbname"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGAPPNAME", "application_name"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
];

/// The variable naming libpq's password file (default `~/.pgpass`), read for a password when
/// no string or variable gives one.
pub const PASSFILE_VARIABLE: &str = "PGPASSFILE";

/// The libpq variables that, alone, name a server.
const NAMING: &[&str] = &["PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE"];

/// Where a resolved connection string came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Given explicitly (a command-line flag, a builder call).
    Explicit,
    /// Read from the named variable.
    Variable(String),
    /// Assembled from libpq's `PG*` variables.
    Libpq,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Explicit => f.write_str("given explicitly"),
            Source::Variable(name) => write!(f, "from {name}"),
            Source::Libpq => f.write_str("from libpq's PG* variables"),
        }
    }
}

/// A connection string found by [`resolve`], with libpq's variables and the password file
/// applied to what it left out.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Resolved {
    /// The parameters to connect with.
    pub info: ConnInfo,
    /// Where the string came from.
    pub source: Source,
    /// The string as given, with its secrets hidden: for messages.
    pub shown: String,
}

impl fmt::Display for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.shown, self.source)
    }
}

/// Why no connection string could be resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResolveError {
    /// Nothing names a server; `tried` lists the variables looked at, in order.
    NoServer {
        /// The variables tried.
        tried: Vec<String>,
    },
    /// The string found does not parse.
    Invalid {
        /// Where it came from.
        source: Source,
        /// What is wrong with it.
        error: ParseError,
    },
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::NoServer { tried } => write!(
                f,
                "no PostgreSQL server named: give a connection string, or set one of {} (tried in \
                 this order)",
                tried.join(", ")
            ),
            ResolveError::Invalid { source, error } => {
                write!(f, "the connection string {source} is invalid: {error}")
            }
        }
    }
}

impl std::error::Error for ResolveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ResolveError::Invalid { error, .. } => Some(error),
            ResolveError::NoServer { .. } => None,
        }
    }
}

/// Finds the server to use, from the process environment: `explicit` if given, else the first
/// of [`URL_VARIABLES`] that is set, else libpq's variables ([`LIBPQ_VARIABLES`]); then, as
/// psql does, libpq's variables fill in the parameters the chosen string leaves out, and the
/// password file (`PGPASSFILE`, else `~/.pgpass`) the password.
///
/// ```
/// let found = tenure_conninfo::resolve(Some("postgres://app@db.internal/orders"))?;
/// assert_eq!(found.info.host(), Some("db.internal"));
/// # Ok::<(), tenure_conninfo::ResolveError>(())
/// ```
pub fn resolve(explicit: Option<&str>) -> Result<Resolved, ResolveError> {
    resolve_with(explicit, URL_VARIABLES, &|name| std::env::var(name).ok())
}

/// [`resolve`] with another list of URL variables (a test suite may put its own first) and
/// another environment (`lookup` answers a variable's value).
pub fn resolve_with(
    explicit: Option<&str>,
    url_variables: &[&str],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ResolveError> {
    let set = |name: &str| lookup(name).filter(|value| !value.is_empty());
    let chosen = match explicit {
        Some(text) => Some((text.to_owned(), Source::Explicit)),
        None => url_variables
            .iter()
            .find_map(|name| set(name).map(|text| (text, Source::Variable((*name).to_owned())))),
    };
    let (mut info, source, shown) = match chosen {
        Some((text, source)) => match ConnInfo::parse(&text) {
            Ok(info) => (info, source, redact(&text)),
            Err(error) => return Err(ResolveError::Invalid { source, error }),
        },
        None if NAMING.iter().any(|name| set(name).is_some()) => {
            (ConnInfo::default(), Source::Libpq, String::new())
        }
        None => {
            let mut tried: Vec<String> = url_variables.iter().map(|s| (*s).to_owned()).collect();
            tried.extend(NAMING.iter().map(|s| (*s).to_owned()));
            return Err(ResolveError::NoServer { tried });
        }
    };
    for (variable, key) in LIBPQ_VARIABLES {
        if info.get(key).is_none()
            && let Some(value) = set(variable)
        {
            info.set(key, value);
        }
    }
    if info.password().is_none()
        && let Some(password) = passfile_password(&info, &set)
    {
        info.set("password", password);
    }
    let shown = if shown.is_empty() {
        info.redacted()
    } else {
        shown
    };
    Ok(Resolved {
        info,
        source,
        shown,
    })
}

/// The password the password file gives for `info`'s host, port, database and user, as libpq
/// looks it up: the first line `host:port:database:user:password` whose fields match (`*`
/// matches anything; `\:` and `\\` are escapes). A file that others can read is ignored, as
/// libpq ignores it.
fn passfile_password(info: &ConnInfo, set: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let path = match set(PASSFILE_VARIABLE) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(set("HOME")?).join(".pgpass"),
    };
    let host = match info.host() {
        None => "localhost",
        Some(host) if host.contains(',') => return None,
        Some(host) if host.starts_with('/') => "localhost",
        Some(host) => host,
    };
    let port = info.port().unwrap_or("5432");
    let user = info.user().map(str::to_owned).or_else(|| set("USER"))?;
    let dbname = info.dbname().unwrap_or(&user).to_owned();
    if !private(&path) {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(passfile_fields)
        .find(|fields| {
            let wanted = [host, port, dbname.as_str(), user.as_str()];
            fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, value)| field == "*" || field == value)
        })
        .map(|mut fields| fields.swap_remove(4))
}

#[cfg(unix)]
fn private(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 == 0)
}

#[cfg(not(unix))]
fn private(_path: &std::path::Path) -> bool {
    true
}

/// The five fields of a password file line, unescaped; `None` if it does not have five.
fn passfile_fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn precedence() {
        let all = env(&[
            ("TENURE_DATABASE_URL", "postgres://t/tenure"),
            ("DATABASE_URL", "postgres://d/database"),
            ("PGHOST", "p"),
        ]);
        let got = resolve_with(Some("postgres://e/explicit"), URL_VARIABLES, &all).unwrap();
        assert_eq!((got.info.host(), got.source), (Some("e"), Source::Explicit));
        let got = resolve_with(None, URL_VARIABLES, &all).unwrap();
        assert_eq!(
            (got.info.host(), got.source),
            (Some("t"), Source::Variable("TENURE_DATABASE_URL".into()))
        );
        let no_tenure = env(&[("DATABASE_URL", "postgres://d/database"), ("PGHOST", "p")]);
        let got = resolve_with(None, URL_VARIABLES, &no_tenure).unwrap();
        assert_eq!(got.source, Source::Variable("DATABASE_URL".into()));
        let only_libpq = env(&[
            ("PGHOST", "p"),
            ("PGPORT", "6432"),
            ("PGUSER", "u"),
            ("PGPASSWORD", "s3cret"),
            ("PGDATABASE", "db"),
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", "/etc/ca.pem"),
        ]);
        let got = resolve_with(None, URL_VARIABLES, &only_libpq).unwrap();
        assert_eq!(got.source, Source::Libpq);
        let wanted = "host='p' port='6432' user='u' password='s3cret' dbname='db' \
                      sslmode='verify-full' sslrootcert='/etc/ca.pem'";
        assert_eq!(got.info.to_key_value_string(), wanted);
        assert!(!got.to_string().contains("s3cret"), "{got}");
        // A test suite can put its own variable first.
        let legacy = env(&[
            ("TENURE_PG_URL", "postgres://legacy"),
            ("DATABASE_URL", "postgres://d"),
        ]);
        let got = resolve_with(None, &["TENURE_PG_URL", "DATABASE_URL"], &legacy).unwrap();
        assert_eq!(got.info.host(), Some("legacy"));
    }

    #[test]
    fn libpq_variables_fill_in_what_the_string_leaves_out() {
        let vars = env(&[
            ("PGPASSWORD", "pw"),
            ("PGSSLMODE", "require"),
            ("PGHOST", "ignored"),
        ]);
        let got = resolve_with(
            Some("postgres://u@h/db?sslmode=disable"),
            URL_VARIABLES,
            &vars,
        )
        .unwrap();
        assert_eq!(got.info.host(), Some("h"));
        assert_eq!(got.info.password(), Some("pw"));
        assert_eq!(got.info.get("sslmode"), Some("disable"));
        assert_eq!(got.shown, "postgres://u@h/db?sslmode=disable");
    }

    #[test]
    fn nothing_set_names_every_variable_tried() {
        let err = resolve_with(None, URL_VARIABLES, &env(&[("PGPASSWORD", "x")])).unwrap_err();
        let text = err.to_string();
        for name in [
            "TENURE_DATABASE_URL",
            "DATABASE_URL",
            "PGHOST",
            "PGPORT",
            "PGDATABASE",
        ] {
            assert!(text.contains(name), "{text}");
        }
        let empty = env(&[("DATABASE_URL", "")]);
        assert!(matches!(
            resolve_with(None, URL_VARIABLES, &empty),
            Err(ResolveError::NoServer { .. })
        ));
    }

    #[test]
    fn an_invalid_string_says_where_it_came_from_and_hides_the_password() {
        let vars = env(&[("DATABASE_URL", "postgres://u:s3cret@h:port/db")]);
        let err = resolve_with(None, URL_VARIABLES, &vars).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("from DATABASE_URL"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn the_password_file() {
        let dir = std::env::temp_dir().join(format!("tenure-conninfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pgpass");
        std::fs::write(
            &path,
            "# comment\nother:5432:*:u:wrong\nh:5432:db:u:p\\:w\\\\d\n*:*:*:*:fallback\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let file = path.to_str().unwrap();
        let vars = env(&[(PASSFILE_VARIABLE, file)]);
        let got = resolve_with(Some("host=h user=u dbname=db"), URL_VARIABLES, &vars).unwrap();
        assert_eq!(got.info.password(), Some(r"p:w\d"));
        let got = resolve_with(Some("host=x user=u"), URL_VARIABLES, &vars).unwrap();
        assert_eq!(got.info.password(), Some("fallback"));
        let given = resolve_with(
            Some("host=h user=u dbname=db password=mine"),
            URL_VARIABLES,
            &vars,
        );
        assert_eq!(given.unwrap().info.password(), Some("mine"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let got = resolve_with(Some("host=h user=u dbname=db"), URL_VARIABLES, &vars).unwrap();
            assert_eq!(
                got.info.password(),
                None,
                "a file others can read is ignored"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
