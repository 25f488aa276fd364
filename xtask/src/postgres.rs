//! Which PostgreSQL server the xtask's test runs use, and the local images for containers.
//!
//! The xtask decides and says so; the test processes follow through the variables it sets,
//! which `tenure-pg-test` reads (its crate documentation and `docs/testing.md`):
//!
//! * a server named by the environment, as `tenure-pg-test` reads it
//!   (`tenure_conninfo::TEST_URL_VARIABLES`: `TENURE_DATABASE_URL`, `TENURE_PG_URL`
//!   (deprecated), `DATABASE_URL`, then libpq's `PG*` variables): that server, as it is (CI's
//!   main suite; it overrides containers);
//! * else a Docker engine answers: a fresh container per test process, through
//!   testcontainers (`TENURE_PG_SOURCE=container`, `TENURE_PG_VERSION`, `TENURE_PG_IMAGE`),
//!   built with `tenure-pg-test/docker` in a target directory of its own;
//! * else the local server on 127.0.0.1:5432 (`TENURE_PG_SOURCE=local`).

use std::env;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::cargo;

/// The images `cargo xtask pg-image` knows how to build, and the versions `cargo xtask test`
/// runs the conformance kit against in containers.
pub const VERSIONS: &[u32] = &[15, 17];

/// The version of a container when none is asked for.
pub const DEFAULT_VERSION: u32 = 17;

/// The image name of containers unless `TENURE_PG_IMAGE` names another (the same default as
/// `tenure_pg_test::DEFAULT_IMAGE`).
const LOCAL_IMAGE: &str = "tenure-postgres";

/// Where a run's PostgreSQL tests find their server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    /// The server the environment names: the test processes find it there themselves.
    Named {
        /// The variable (or `libpq's PG* variables`) that names it.
        by: String,
        /// The connection string, secrets hidden.
        shown: String,
    },
    /// A container per test process, of `image:version`.
    Container { image: String, version: u32 },
    /// The local server on 127.0.0.1:5432.
    Local,
}

/// A decision, with the sentence that tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub server: Server,
    /// The major version asked for with `--pg-version`, checked against any server.
    pub version: Option<u32>,
    pub said: String,
}

impl Plan {
    /// Decides from this process's environment and a probe of the Docker engine.
    pub fn decide(version: Option<u32>) -> Plan {
        let named = named_server(&|name| env::var(name).ok());
        let engine = match &named {
            Some(_) => Err("not probed".to_owned()),
            None => probe(env::var("DOCKER_HOST").ok().as_deref()),
        };
        Plan::from_facts(named, engine, image(), version)
    }

    /// The decision for given facts: the server the environment names (`named`: by what, and
    /// the string, secrets hidden), else a container if the engine answered (`engine` is its
    /// socket, or why it does not answer), else the local server.
    pub fn from_facts(
        named: Option<(String, String)>,
        engine: Result<String, String>,
        image: String,
        version: Option<u32>,
    ) -> Plan {
        let (server, said) = match (named, engine) {
            (Some((by, shown)), _) => {
                let said = format!("PostgreSQL from {by} = {shown} (it overrides containers)");
                (Server::Named { by, shown }, said)
            }
            (None, Ok(socket)) => {
                let version = version.unwrap_or(DEFAULT_VERSION);
                let said = format!(
                    "a Docker engine answers on {socket}: the PostgreSQL tests run in fresh \
                     containers of {image}:{version}, through testcontainers"
                );
                (Server::Container { image, version }, said)
            }
            (None, Err(why)) => (
                Server::Local,
                format!(
                    "no Docker engine answers ({why}): the PostgreSQL tests use the local \
                     server on 127.0.0.1:5432"
                ),
            ),
        };
        Plan {
            server,
            version,
            said,
        }
    }

    /// A container of `version`, on the engine at `socket`, whatever the environment names.
    pub fn container(socket: &str, version: u32) -> Plan {
        Plan::from_facts(None, Ok(socket.to_owned()), image(), Some(version))
    }

    /// The plan for the main suite: the server the environment names, else the local server (containers are for
    /// the conformance kit's runs, one per version).
    pub fn main_suite() -> Plan {
        let mut plan = Plan::decide(None);
        if matches!(plan.server, Server::Container { .. }) {
            plan = Plan {
                server: Server::Local,
                version: None,
                said: "the PostgreSQL tests of this step use the local server on \
                       127.0.0.1:5432 (set TENURE_DATABASE_URL for another)"
                    .to_owned(),
            };
        }
        plan
    }

    pub fn say(&self) {
        println!("xtask: {}", self.said);
    }

    /// How the summary names the server: `TENURE_DATABASE_URL` (the variable), `local server`,
    /// `container, PostgreSQL 17`.
    pub fn label(&self) -> String {
        let base = match &self.server {
            Server::Named { by, .. } => by.as_str(),
            Server::Local => "local server",
            Server::Container { version, .. } => {
                return format!("container, PostgreSQL {version}");
            }
        };
        match self.version {
            Some(version) => format!("{base}, PostgreSQL {version}"),
            None => base.to_owned(),
        }
    }

    /// `cargo test` for the given arguments, set up for this plan: the variables the test
    /// processes read, and for containers the `docker` feature in a target directory of its
    /// own (so that the main suite's build is not redone with other features).
    pub fn cargo_test(&self, args: &[&str]) -> Command {
        let mut all = vec!["test"];
        if matches!(self.server, Server::Container { .. }) {
            all.extend(["--features", "tenure-pg-test/docker"]);
        }
        all.extend(args);
        let mut command = cargo::command(&all);
        match &self.server {
            Server::Named { .. } => {
                command.env_remove("TENURE_PG_SOURCE");
            }
            Server::Local => {
                command.env("TENURE_PG_SOURCE", "local");
            }
            Server::Container { image, version } => {
                for variable in naming_variables() {
                    command.env_remove(variable);
                }
                command
                    .env("TENURE_PG_SOURCE", "container")
                    .env("TENURE_PG_IMAGE", image)
                    .env("TENURE_PG_VERSION", version.to_string())
                    .env("TENURE_PG_RUN", run_id())
                    .env("CARGO_TARGET_DIR", containers_target_dir());
            }
        }
        match self.version {
            Some(version) => command.env("TENURE_PG_VERSION", version.to_string()),
            None if !matches!(self.server, Server::Container { .. }) => {
                command.env_remove("TENURE_PG_VERSION")
            }
            None => &mut command,
        };
        command
    }

    /// Before a container run: the image must be on the engine (it would otherwise try a
    /// registry); an error naming the command that builds it.
    pub fn check_image(&self) -> Result<(), String> {
        let Server::Container { image, version } = &self.server else {
            return Ok(());
        };
        let socket = probe(env::var("DOCKER_HOST").ok().as_deref())?;
        let reference = format!("{image}:{version}");
        match get(&socket, &format!("/images/{reference}/json"))? {
            200 => Ok(()),
            404 if image == LOCAL_IMAGE => Err(format!(
                "the image {reference} is not built on this Docker engine: build it with \
                 `cargo xtask pg-image --pg-version {version}` (no registry is tried)"
            )),
            404 => Err(format!(
                "the image {reference} is not on this Docker engine, and the tests never pull: \
                 `docker pull {reference}` first, or unset TENURE_PG_IMAGE to use the local \
                 image (`cargo xtask pg-image`)"
            )),
            status => Err(format!(
                "the Docker engine answers {status} about the image {reference}"
            )),
        }
    }
}

/// After a container run: no container of this run may be left (each test process's watcher
/// removes its own when the process ends). Leftovers are removed, and are an error.
pub fn sweep(plan: &Plan) -> Result<(), String> {
    if !matches!(plan.server, Server::Container { .. }) {
        return Ok(());
    }
    let socket = probe(env::var("DOCKER_HOST").ok().as_deref())?;
    let filter = format!("{{\"label\":[\"{RUN_LABEL}={}\"]}}", run_id());
    let path = format!("/containers/json?all=1&filters={}", percent_encode(&filter));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = request(&socket, "GET", &path)?;
        if status != 200 {
            return Err(format!(
                "listing the containers of this run: status {status}"
            ));
        }
        let left = container_ids(&body);
        if left.is_empty() {
            println!("xtask: no container of this run is left on the engine");
            return Ok(());
        }
        if Instant::now() >= deadline {
            for id in &left {
                let _ = request(&socket, "DELETE", &format!("/containers/{id}?force=1&v=1"));
            }
            return Err(format!(
                "{} container(s) outlived their test process and were removed now: {}",
                left.len(),
                left.join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The label tenure-pg-test puts on the containers of one xtask run (`TENURE_PG_RUN`).
const RUN_LABEL: &str = "org.tenure.pg-test.run";

/// This xtask run's identity, for `TENURE_PG_RUN`.
fn run_id() -> String {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        format!("xtask-{}-{since}", std::process::id())
    })
    .clone()
}

/// The `"Id"` values of the engine's container list (a JSON array of objects).
fn container_ids(body: &str) -> Vec<String> {
    body.split("\"Id\":\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_owned)
        .collect()
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The target directory of the container builds.
pub fn containers_target_dir() -> PathBuf {
    cargo::target_dir().join("containers")
}

/// `cargo xtask pg-image`: builds the local images (all known versions, or one).
pub fn build_images(version: Option<u32>) -> Result<(), String> {
    let versions = match version {
        None => VERSIONS.to_vec(),
        Some(v) if VERSIONS.contains(&v) => vec![v],
        Some(v) => {
            return Err(format!(
                "no image recipe for PostgreSQL {v}; the recipe (images/postgres/build.sh) \
                 knows {VERSIONS:?}"
            ));
        }
    };
    let socket = probe(env::var("DOCKER_HOST").ok().as_deref()).map_err(|why| {
        format!("no Docker engine answers ({why}); docs/testing.md tells how to start one")
    })?;
    println!("xtask: building the PostgreSQL images on the engine at {socket}");
    let script = cargo::workspace_root().join("images/postgres/build.sh");
    for version in versions {
        let mut command = Command::new("bash");
        command.arg(&script).arg(version.to_string());
        cargo::status(&mut command)?;
    }
    Ok(())
}

/// The image name of containers: `TENURE_PG_IMAGE`, else the local image.
fn image() -> String {
    env::var("TENURE_PG_IMAGE")
        .ok()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| LOCAL_IMAGE.to_owned())
}

/// The engine's socket if it answers its ping, else why not. `docker_host` is `DOCKER_HOST`.
pub fn probe(docker_host: Option<&str>) -> Result<String, String> {
    let socket = match docker_host.filter(|h| !h.is_empty()) {
        None => "/var/run/docker.sock".to_owned(),
        Some(host) => match host.strip_prefix("unix://") {
            Some(path) => path.to_owned(),
            None => {
                return Err(format!(
                    "DOCKER_HOST={host} is not a unix socket, and the xtask probes only those"
                ));
            }
        },
    };
    match get(&socket, "/_ping") {
        Ok(200) => Ok(socket),
        Ok(status) => Err(format!("{socket} answers {status} to a ping")),
        Err(err) => Err(err),
    }
}

/// The status code of `GET path` on the engine at `socket`.
fn get(socket: &str, path: &str) -> Result<u16, String> {
    request(socket, "GET", path).map(|(status, _)| status)
}

/// One HTTP/1.0 request to the engine at `socket` (which then closes the connection): its
/// status code and body.
fn request(socket: &str, method: &str, path: &str) -> Result<(u16, String), String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| format!("{socket}: {e}"))?;
    let timeout = Some(Duration::from_secs(5));
    let mut response = Vec::new();
    // One write: a peer that reads the head and closes must not find half a request.
    let head = format!("{method} {path} HTTP/1.0\r\nHost: docker\r\n\r\n");
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .and_then(|()| stream.write_all(head.as_bytes()))
        .and_then(|()| stream.take(1 << 20).read_to_end(&mut response))
        .map_err(|e| format!("{socket}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("{socket} does not answer HTTP"))?;
    Ok((status, body.to_owned()))
}

/// The server the environment names for the test processes, as `tenure-pg-test` finds it
/// (`lookup` answers a variable): by what, and its string with secrets hidden.
pub fn named_server(lookup: &dyn Fn(&str) -> Option<String>) -> Option<(String, String)> {
    use tenure_conninfo::Source;
    match tenure_conninfo::resolve_with(None, tenure_conninfo::TEST_URL_VARIABLES, lookup) {
        Ok(found) => {
            let by = match &found.source {
                Source::Variable(name) => name.clone(),
                other => other.to_string(),
            };
            Some((by, found.shown))
        }
        // An unparsable string still names a server: the tests report it.
        Err(tenure_conninfo::ResolveError::Invalid { source, .. }) => {
            Some((source.to_string(), "(invalid)".to_owned()))
        }
        Err(_) => None,
    }
}

/// Every variable that could name a server for the test processes: removed for container runs.
fn naming_variables() -> impl Iterator<Item = &'static str> {
    tenure_conninfo::TEST_URL_VARIABLES
        .iter()
        .chain(tenure_conninfo::NAMING_VARIABLES)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn socket_path(name: &str) -> PathBuf {
        env::temp_dir().join(format!("xtask-{name}-{}.sock", std::process::id()))
    }

    /// A socket file nobody listens on any more: what a stopped engine leaves behind.
    fn dead_socket() -> PathBuf {
        let path = socket_path("dead");
        let _ = std::fs::remove_file(&path);
        drop(UnixListener::bind(&path).unwrap());
        path
    }

    /// One connection answered with `response`, on a thread. It reads the whole request head
    /// first: closing a Unix socket with unread bytes resets it, and the client would then see
    /// a reset instead of the response (CI saw exactly that once).
    fn fake_engine(name: &str, response: &'static str) -> PathBuf {
        let path = socket_path(name);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") && matches!(stream.read(&mut byte), Ok(1)) {
                    request.push(byte[0]);
                }
                let _ = stream.write_all(response.as_bytes());
            }
        });
        path
    }

    #[test]
    fn no_engine_answering_means_the_local_server_and_says_so() {
        let dead = dead_socket();
        let docker_host = format!("unix://{}", dead.display());
        let engine = probe(Some(&docker_host));
        assert!(engine.is_err(), "{engine:?}");
        let plan = Plan::from_facts(None, engine, LOCAL_IMAGE.to_owned(), None);
        assert_eq!(plan.server, Server::Local);
        assert!(
            plan.said.starts_with("no Docker engine answers"),
            "{}",
            plan.said
        );
        assert!(
            plan.said.contains(&dead.display().to_string()),
            "{}",
            plan.said
        );
        assert!(plan.said.contains("local server"), "{}", plan.said);
        assert_eq!(plan.label(), "local server");
        let command = plan.cargo_test(&["-p", "tenure-postgres"]);
        assert!(
            command
                .get_envs()
                .any(|(k, v)| k == "TENURE_PG_SOURCE" && v.is_some_and(|v| v == "local"))
        );
        assert!(!command.get_args().any(|a| a == "tenure-pg-test/docker"));
        let _ = std::fs::remove_file(dead);
    }

    #[test]
    fn an_engine_that_answers_means_a_container_of_the_version_asked() {
        let path = fake_engine("live", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK");
        let engine = probe(Some(&format!("unix://{}", path.display())));
        assert_eq!(engine.as_deref(), Ok(path.to_str().unwrap()));
        let plan = Plan::from_facts(None, engine, LOCAL_IMAGE.to_owned(), Some(15));
        assert_eq!(
            plan.server,
            Server::Container {
                image: LOCAL_IMAGE.to_owned(),
                version: 15
            }
        );
        assert_eq!(plan.label(), "container, PostgreSQL 15");
        let command = plan.cargo_test(&[]);
        let env: Vec<(String, Option<String>)> = command
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        assert!(env.contains(&("TENURE_PG_SOURCE".into(), Some("container".into()))));
        assert!(env.contains(&("TENURE_PG_VERSION".into(), Some("15".into()))));
        for variable in [
            "TENURE_PG_URL",
            "TENURE_DATABASE_URL",
            "DATABASE_URL",
            "PGHOST",
        ] {
            assert!(env.contains(&(variable.into(), None)), "{env:?}");
        }
        assert!(command.get_args().any(|a| a == "tenure-pg-test/docker"));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_socket_that_is_no_engine_does_not_count() {
        let path = fake_engine("teapot", "HTTP/1.1 418 I'm a teapot\r\n\r\n");
        let err = probe(Some(&format!("unix://{}", path.display()))).unwrap_err();
        assert!(err.contains("418"), "{err}");
        let path = fake_engine("mute", "");
        let err = probe(Some(&format!("unix://{}", path.display()))).unwrap_err();
        assert!(err.contains("does not answer HTTP"), "{err}");
        assert!(probe(Some("tcp://127.0.0.1:2375")).is_err());
    }

    #[test]
    fn a_url_overrides_the_engine() {
        let env = |name: &str| (name == "TENURE_PG_URL").then(|| "postgres://u:pw@db/x".to_owned());
        let plan = Plan::from_facts(
            named_server(&env),
            Ok("/var/run/docker.sock".into()),
            LOCAL_IMAGE.to_owned(),
            Some(17),
        );
        assert_eq!(
            plan.server,
            Server::Named {
                by: "TENURE_PG_URL".into(),
                shown: "postgres://u:***@db/x".into()
            }
        );
        assert!(!plan.said.contains("pw"), "{}", plan.said);
        assert_eq!(plan.label(), "TENURE_PG_URL, PostgreSQL 17");
        let env = |name: &str| match name {
            "PGHOST" => Some("db".to_owned()),
            "PGPASSWORD" => Some("pw".to_owned()),
            _ => None,
        };
        let (by, shown) = named_server(&env).unwrap();
        assert_eq!(by, "from libpq's PG* variables");
        assert!(!shown.contains("pw"), "{shown}");
    }

    #[test]
    fn container_lists_are_read_for_their_ids() {
        let body =
            r#"[{"Id":"8dfafdbc3a40","Names":["/x"],"Labels":{"a":"\"Id\":\"zz"}},{"Id":"1f2e"}]"#;
        assert_eq!(container_ids(body), ["8dfafdbc3a40", "1f2e"]);
        assert!(container_ids("[]").is_empty());
        assert_eq!(
            percent_encode(r#"{"label":["a=b"]}"#),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
    }
}
