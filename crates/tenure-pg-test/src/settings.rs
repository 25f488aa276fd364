//! What the environment asks of the test server: the variables `cargo xtask` sets for the test
//! processes it runs, read in one place.

/// The image name used for containers unless `TENURE_PG_IMAGE` names another: the local image
/// that `cargo xtask pg-image` builds (`images/postgres/build.sh`).
pub const DEFAULT_IMAGE: &str = "tenure-postgres";

/// The PostgreSQL major version of a container unless `TENURE_PG_VERSION` asks for another.
pub const DEFAULT_VERSION: u32 = 17;

/// Which way of finding a server `TENURE_PG_SOURCE` asks for (`TENURE_PG_URL` overrides it).
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
    /// `TENURE_PG_URL`: a server to use as it is (it overrides everything else).
    pub url: Option<String>,
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
        Ok(Settings {
            url: var("TENURE_PG_URL"),
            source,
            version,
            image,
            run: var("TENURE_PG_RUN"),
        })
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
