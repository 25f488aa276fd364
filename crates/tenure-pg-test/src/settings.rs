//! What the environment asks of the test server: the variables `cargo xtask` sets for the test
//! processes it runs, read in one place.

/// The variables that name the test server, in order: those of the `tenure` command, with
/// `TENURE_PG_URL`, the old name of `TENURE_DATABASE_URL` for the tests, still read (deprecated).
pub const URL_VARIABLES: &[&str] = tenure_conninfo::TEST_URL_VARIABLES;

/// The image name used for containers unless `TENURE_PG_IMAGE` names another: the local image
/// that `cargo xtask pg-image` builds (`images/postgres/build.sh`).
pub const DEFAULT_IMAGE: &str = "tenure-postgres";

/// The PostgreSQL major version of a container unless `TENURE_PG_VERSION` asks for another.
pub const DEFAULT_VERSION: u32 = 17;

/// Which way of finding a server `TENURE_PG_SOURCE` asks for (a server named by the
/// environment, [`URL_VARIABLES`], overrides it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Unset or `auto`: a container when the `docker` feature is built in and an engine
    /// answers, else the local server.
    Auto,
    /// `container`: a container, or an error; never the local server.
    Container,
    /// `local`: the local server on `127.0.0.1:5432`, or an error; never a container.
    Local,
}

/// The settings of a test run, from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The server the environment names, to use as it is (it overrides everything else):
    /// `TENURE_DATABASE_URL`, else `TENURE_PG_URL` (its deprecated name), else `DATABASE_URL`,
    /// else libpq's `PG*` variables (then as a key/value string), read by
    /// `tenure_conninfo::resolve_with`, as the `tenure` command reads them.
    pub url: Option<String>,
    /// Where [`url`](Self::url) came from (`TENURE_DATABASE_URL`, …, `libpq's PG* variables`).
    pub named_by: Option<String>,
    /// `TENURE_PG_SOURCE`.
    pub source: Source,
    /// `TENURE_PG_VERSION`: the major version a container runs (its image tag), and the major
    /// version any server must have (checked at the first connection).
    pub version: Option<u32>,
    /// `TENURE_PG_IMAGE`: the image name of containers, without its tag.
    pub image: String,
    /// `TENURE_PG_RUN`: the run (of `cargo xtask`) that containers are labelled with, so
    /// that it can check that none is left at its end.
    pub run: Option<String>,
}

impl Settings {
    /// Reads the settings from this process's environment.
    pub fn from_env() -> Result<Settings, String> {
        Settings::parse(|key| std::env::var(key).ok())
    }

    /// Reads the settings through `var`, which answers a variable's value (empty values count
    /// as unset).
    pub fn parse(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let var = |key: &str| var(key).filter(|v| !v.trim().is_empty());
        let source = match var("TENURE_PG_SOURCE").as_deref().map(str::trim) {
            None | Some("auto") => Source::Auto,
            Some("container") => Source::Container,
            Some("local") => Source::Local,
            Some(other) => {
                return Err(format!(
                    "TENURE_PG_SOURCE={other:?} is not one of auto, container, local"
                ));
            }
        };
        let version = match var("TENURE_PG_VERSION") {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n >= 10)
                    .ok_or_else(|| {
                        format!("TENURE_PG_VERSION={v:?} is not a PostgreSQL major version")
                    })?,
            ),
        };
        let image = var("TENURE_PG_IMAGE").unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
        let last_part = image.rsplit('/').next().unwrap_or_default();
        if last_part.contains(':') || image.contains('@') {
            return Err(format!(
                "TENURE_PG_IMAGE={image:?} must name an image without a tag; \
                 TENURE_PG_VERSION gives the tag"
            ));
        }
        let (url, named_by) = named_server(&var)?;
        Ok(Settings {
            url,
            named_by,
            source,
            version,
            image,
            run: var("TENURE_PG_RUN"),
        })
    }

    /// Whether the server comes from the deprecated `TENURE_PG_URL`.
    pub fn deprecated_variable(&self) -> bool {
        self.named_by.as_deref() == Some("TENURE_PG_URL")
    }

    /// The image tag of a container: the major version.
    pub fn tag(&self) -> String {
        self.version.unwrap_or(DEFAULT_VERSION).to_string()
    }

    /// `name:tag` of a container's image.
    pub fn image_reference(&self) -> String {
        format!("{}:{}", self.image, self.tag())
    }
}

/// The server the environment names, if any, and where it came from.
fn named_server(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<String>, Option<String>), String> {
    use tenure_conninfo::{ResolveError, Source};
    match tenure_conninfo::resolve_with(None, URL_VARIABLES, var) {
        Ok(found) => Ok(match found.source {
            Source::Variable(name) => (var(&name), Some(name)),
            other => (
                Some(found.info.to_key_value_string()),
                Some(other.to_string()),
            ),
        }),
        Err(ResolveError::NoServer { .. }) => Ok((None, None)),
        Err(err) => Err(err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::parse(|key| {
            vars.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn nothing_set_means_auto_and_the_local_image() {
        let settings = parse(&[]).unwrap();
        assert_eq!(settings.source, Source::Auto);
        assert_eq!(settings.url, None);
        assert_eq!(settings.image_reference(), "tenure-postgres:17");
    }

    #[test]
    fn the_xtask_variables_are_read() {
        let settings = parse(&[
            ("TENURE_PG_SOURCE", "container"),
            ("TENURE_PG_VERSION", "15"),
            ("TENURE_PG_IMAGE", "postgres"),
            ("TENURE_PG_URL", " "),
        ])
        .unwrap();
        assert_eq!(settings.source, Source::Container);
        assert_eq!(settings.version, Some(15));
        assert_eq!(settings.url, None, "an empty URL counts as unset");
        let named = |vars: &[(&str, &str)]| {
            let s = parse(vars).unwrap();
            (s.url, s.named_by)
        };
        let some = |u: &str, n: &str| (Some(u.to_owned()), Some(n.to_owned()));
        assert_eq!(
            named(&[
                ("TENURE_PG_URL", "postgres://old/x"),
                ("DATABASE_URL", "postgres://d/x")
            ]),
            some("postgres://old/x", "TENURE_PG_URL")
        );
        assert_eq!(
            named(&[
                ("TENURE_PG_URL", "postgres://old/x"),
                ("TENURE_DATABASE_URL", "postgres://new/x")
            ]),
            some("postgres://new/x", "TENURE_DATABASE_URL")
        );
        assert_eq!(
            named(&[("PGHOST", "h"), ("PGUSER", "u")]),
            some("host='h' user='u'", "from libpq's PG* variables")
        );
        assert_eq!(settings.image_reference(), "postgres:15");
        assert_eq!(
            parse(&[("TENURE_PG_SOURCE", "local")]).unwrap().source,
            Source::Local
        );
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let err = parse(&[("TENURE_PG_SOURCE", "docker")]).unwrap_err();
        assert!(err.contains("TENURE_PG_SOURCE"), "{err}");
        let err = parse(&[("TENURE_PG_VERSION", "seventeen")]).unwrap_err();
        assert!(err.contains("TENURE_PG_VERSION"), "{err}");
        assert!(parse(&[("TENURE_PG_VERSION", "9")]).is_err());
        let err = parse(&[("TENURE_PG_IMAGE", "postgres:17")]).unwrap_err();
        assert!(err.contains("without a tag"), "{err}");
        assert!(parse(&[("TENURE_PG_IMAGE", "registry:5000/pg")]).is_ok());
        assert!(parse(&[("TENURE_PG_IMAGE", "registry:5000/pg:17")]).is_err());
    }
}
