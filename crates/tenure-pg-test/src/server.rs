//! Finding the PostgreSQL server of a test run (see the crate documentation for the order).

use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use tokio_postgres::Client;

use crate::settings::{Settings, Source};

/// The connection string used for a local server.
pub const LOCAL_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Where the server of this test run comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Origin {
    /// Named by the environment: `TENURE_DATABASE_URL`, `TENURE_PG_URL` (deprecated),
    /// `DATABASE_URL` or libpq's `PG*` variables ([`crate::settings::URL_VARIABLES`]).
    Environment,
    /// A container started for this process through testcontainers.
    Container,
    /// The local server on `127.0.0.1:5432`.
    Local,
}

/// A PostgreSQL server to test against. Its `Debug` output hides the password.
#[derive(Clone)]
pub struct Server {
    /// Its connection string (it may carry a password: print [`Server::redacted_url`]).
    pub url: String,
    /// Where it comes from.
    pub origin: Origin,
    /// Its version, as `SHOW server_version` answers it (`17.6`, `15.14 (Debian …)`).
    pub version: String,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("url", &self.redacted_url())
            .field("origin", &self.origin)
            .field("version", &self.version)
            .finish()
    }
}

impl Server {
    /// The connection string with its password, if any, replaced by `***`.
    pub fn redacted_url(&self) -> String {
        tenure_conninfo::redact(&self.url)
    }

    /// A new connection, driven on the current tokio runtime.
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        crate::connect(&self.url).await
    }
}

/// The server for this test run, for tests and benchmarks that need one: they fail, never
/// skip, without PostgreSQL.
///
/// # Panics
///
/// When no server can be found, with the message of [`server`], which names the ways to
/// provide one.
pub fn required_server() -> &'static Server {
    match server() {
        Ok(server) => server,
        Err(message) => panic!("{message}"),
    }
}

/// The server for this test run, found once per process (see the crate documentation).
///
/// It prints, once, to this process's standard error (past the test harness's capture), which
/// server it uses and its version.
pub fn server() -> Result<&'static Server, String> {
    static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let settings = Settings::from_env();
            let found = settings.as_ref().map_err(Clone::clone).and_then(find);
            let named_by = settings
                .as_ref()
                .ok()
                .and_then(|s| s.named_by.clone())
                .unwrap_or_default();
            let mut line = match &found {
                Ok(server) => format!(
                    "tenure-pg-test: using PostgreSQL {} from {} ({})",
                    server.version,
                    match server.origin {
                        Origin::Environment => named_by.as_str(),
                        Origin::Container => "a container started for this process",
                        Origin::Local => "the local server on 127.0.0.1:5432",
                    },
                    server.redacted_url()
                ),
                Err(message) => format!("tenure-pg-test: {message}"),
            };
            if settings.as_ref().is_ok_and(Settings::deprecated_variable) {
                line.push_str(
                    "\ntenure-pg-test: TENURE_PG_URL is deprecated: set TENURE_DATABASE_URL",
                );
            }
            // Written to the stream itself: `eprintln!` would land in the capture of whichever
            // test happened to ask first.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "{line}");
            found
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Finds a server as `settings` ask, then checks that it answers and has the version asked.
pub fn find(settings: &Settings) -> Result<Server, String> {
    let (url, origin) = locate(settings)?;
    let version = server_version(&url).map_err(|e| {
        format!(
            "the server at {} does not answer: {}",
            tenure_conninfo::redact(&url),
            tenure_conninfo::scrub(&e, &url)
        )
    })?;
    if let Some(wanted) = settings.version {
        let major = version
            .split(['.', ' '])
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        if major != Some(wanted) {
            return Err(format!(
                "TENURE_PG_VERSION={wanted}, but the server at {} runs PostgreSQL {version}",
                tenure_conninfo::redact(&url)
            ));
        }
    }
    Ok(Server {
        url,
        origin,
        version,
    })
}

fn locate(settings: &Settings) -> Result<(String, Origin), String> {
    if let Some(url) = &settings.url {
        return Ok((url.clone(), Origin::Environment));
    }
    match settings.source {
        Source::Local => local().map(|url| (url, Origin::Local)).ok_or_else(|| {
            "TENURE_PG_SOURCE=local, but no PostgreSQL server answers on 127.0.0.1:5432 \
             (on Debian: pg_ctlcluster <version> main start)"
                .to_owned()
        }),
        Source::Container => crate::container::start(settings)
            .map(|url| (url, Origin::Container))
            .map_err(|e| format!("TENURE_PG_SOURCE=container: {e}")),
        Source::Auto => auto(settings),
    }
}

/// A container when possible, else the local server, else an error naming the three ways.
fn auto(settings: &Settings) -> Result<(String, Origin), String> {
    let docker = docker_socket();
    let mut docker_note = String::new();
    if let Some(socket) = &docker {
        if crate::container::ENABLED {
            match crate::container::start(settings) {
                Ok(url) => return Ok((url, Origin::Container)),
                Err(err) => docker_note = format!(" (starting a container failed: {err})"),
            }
        } else {
            docker_note = format!(
                " (a Docker engine answers on {socket}, but this build lacks the `docker` \
                 feature of tenure-pg-test)"
            );
        }
    }
    if let Some(url) = local() {
        if !docker_note.is_empty() {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "tenure-pg-test: no container{docker_note}; using the local server"
            );
        }
        return Ok((url, Origin::Local));
    }
    Err(format!(
        "no PostgreSQL server to test against. Set TENURE_DATABASE_URL (or DATABASE_URL, or \
         libpq's PGHOST, PGPORT, PGUSER, PGDATABASE) to name a server; or build \
         with `--features tenure-pg-test/docker` on a machine where a Docker engine answers{}; \
         or start a local server on 127.0.0.1:5432 with user postgres (on Debian: \
         pg_ctlcluster <version> main start). docs/testing.md tells more",
        if docker.is_none() {
            " (none does here)".to_owned()
        } else {
            docker_note
        }
    ))
}

fn local() -> Option<String> {
    let local: SocketAddr = ([127, 0, 0, 1], 5432).into();
    TcpStream::connect_timeout(&local, Duration::from_secs(1))
        .is_ok()
        .then(|| LOCAL_URL.to_owned())
}

/// The Docker engine's socket (`DOCKER_HOST` if it names a unix socket, else
/// `/var/run/docker.sock`), if something listens on it.
fn docker_socket() -> Option<String> {
    let path = match std::env::var("DOCKER_HOST") {
        Ok(host) => host.strip_prefix("unix://")?.to_owned(),
        Err(_) => "/var/run/docker.sock".to_owned(),
    };
    std::os::unix::net::UnixStream::connect(&path)
        .ok()
        .map(|_| path)
}

/// `SHOW server_version`, on a connection of its own.
fn server_version(url: &str) -> Result<String, String> {
    let url = url.to_owned();
    crate::run_detached(move || async move {
        let client = crate::connect(&url).await.map_err(|e| e.to_string())?;
        let row = client
            .query_one("SHOW server_version", &[])
            .await
            .map_err(|e| e.to_string())?;
        row.try_get::<_, String>(0).map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The way `cargo xtask` falls back when no engine answers: `TENURE_PG_SOURCE=local` finds
    /// the local server and nothing else. It needs the local server (and fails without it).
    #[test]
    fn the_local_source_uses_the_local_server() {
        let settings = Settings {
            url: None,
            named_by: None,
            source: Source::Local,
            version: None,
            image: "no-such-image".to_owned(),
            run: None,
        };
        let server = find(&settings).unwrap();
        assert_eq!(server.origin, Origin::Local);
        assert_eq!(server.url, LOCAL_URL);
        assert!(server.version.starts_with(char::is_numeric), "{server:?}");
    }

    #[test]
    fn a_server_of_another_version_is_refused() {
        let local = find(&Settings {
            url: None,
            named_by: None,
            source: Source::Local,
            version: None,
            image: "unused".to_owned(),
            run: None,
        })
        .unwrap();
        let major: u32 = local.version.split('.').next().unwrap().parse().unwrap();
        let err = find(&Settings {
            url: Some(local.url.clone()),
            named_by: None,
            source: Source::Auto,
            version: Some(major + 1),
            image: "unused".to_owned(),
            run: None,
        })
        .unwrap_err();
        assert!(
            err.contains(&format!("TENURE_PG_VERSION={}", major + 1)),
            "{err}"
        );
        assert!(err.contains(&local.version), "{err}");
    }

    #[test]
    fn a_url_overrides_the_source() {
        let server = find(&Settings {
            url: Some(LOCAL_URL.to_owned()),
            named_by: None,
            source: Source::Container,
            version: None,
            image: "no-such-image".to_owned(),
            run: None,
        })
        .unwrap();
        assert_eq!(server.origin, Origin::Environment);
    }
}
