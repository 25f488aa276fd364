//! A PostgreSQL container of this test process, started through testcontainers (feature
//! `docker`).
//!
//! * It never lets the engine reach for a registry: the image (`TENURE_PG_IMAGE`, tag
//!   `TENURE_PG_VERSION`) must already be on the engine, or starting fails with a message
//!   naming the command that builds it.
//! * Its port is published on `127.0.0.1` only, and tests reach it there (the engine's answer
//!   to "which host" can be a bridge address, which the rest of the machine may not route
//!   to; and the container's password is well known).
//! * It is removed when this process ends, however it ends: a watcher process (`sh`, running
//!   the `docker` client) waits for the end of a pipe only this process holds, then removes
//!   the container. Containers that outlived their process anyway (no `docker` client, a
//!   machine that went down) carry labels naming their host and process, and the next start
//!   removes those whose process is gone.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};

use testcontainers_modules::postgres::Postgres;
use testcontainers_modules::testcontainers::bollard::Docker;
use testcontainers_modules::testcontainers::bollard::errors::Error as DockerError;
use testcontainers_modules::testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers_modules::testcontainers::bollard::query_parameters::{
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use testcontainers_modules::testcontainers::runners::AsyncRunner;
use testcontainers_modules::testcontainers::{ContainerAsync, ImageExt};

use crate::settings::Settings;

/// Whether this build can start containers.
pub(crate) const ENABLED: bool = true;

/// The label every container of tenure-pg-test carries; its value is the owner
/// (`<host>/<boot id>/<pid>`).
pub const OWNER_LABEL: &str = "org.tenure.pg-test.owner";

/// The label naming the `cargo xtask` run a container belongs to (`TENURE_PG_RUN`).
pub const RUN_LABEL: &str = "org.tenure.pg-test.run";

/// Removes the container named by `$1` once standard input ends (when the test process that
/// holds the other end exits, whatever the way). It ignores the signals a terminal sends to
/// the whole process group, so that Ctrl-C on a test run still removes the container.
const WATCHER: &str = "trap '' INT TERM HUP QUIT; while read -r _; do :; done; \
                       exec docker rm --force --volumes \"$1\" >/dev/null 2>&1";

/// Starts a container as `settings` ask, on a thread that keeps it (and the runtime its
/// client needs) for the rest of the process; answers its URL on `127.0.0.1`.
pub(crate) fn start(settings: &Settings) -> Result<String, String> {
    let settings = settings.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("tenure-pg-test-container".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = tx.send(Err(format!("starting a runtime: {err}")));
                    return;
                }
            };
            runtime.block_on(async move {
                match launch(&settings).await {
                    Ok(running) => {
                        let _ = tx.send(Ok(running.url.clone()));
                        // Held until the process exits: dropping would remove the container
                        // while tests still use it.
                        std::future::pending::<()>().await;
                        drop(running);
                    }
                    Err(err) => {
                        let _ = tx.send(Err(err));
                    }
                }
            });
        })
        .map_err(|e| format!("starting the container thread: {e}"))?;
    rx.recv()
        .map_err(|_| "the container thread ended without an answer".to_owned())?
}

/// A started container, its watcher, and its URL.
struct Running {
    _container: ContainerAsync<Postgres>,
    _watcher: Option<Child>,
    url: String,
}

async fn launch(settings: &Settings) -> Result<Running, String> {
    let docker = Docker::connect_with_defaults()
        .map_err(|e| format!("connecting to the Docker engine: {e}"))?
        .negotiate_version()
        .await
        .map_err(|e| format!("the Docker engine does not answer: {e}"))?;
    let image = settings.image_reference();
    require_image(&docker, &image).await?;
    remove_stale(&docker).await;

    let owner = owner();
    let container = Postgres::default()
        .with_name(settings.image.clone())
        .with_tag(settings.tag())
        .with_label(OWNER_LABEL, owner)
        .with_label(RUN_LABEL, settings.run.clone().unwrap_or_default())
        .with_startup_timeout(std::time::Duration::from_secs(120))
        .with_host_config_modifier(publish_on_loopback)
        .start()
        .await
        .map_err(|e| format!("starting a container of {image}: {e}"))?;
    let id = container.id().to_owned();
    let watcher = watch(&id);
    let port = container
        .get_host_port_ipv4(5432)
        .await
        .map_err(|e| format!("the port of container {id} published on the host: {e}"))?;
    Ok(Running {
        _container: container,
        _watcher: watcher,
        url: format!("postgres://postgres:postgres@127.0.0.1:{port}/postgres"),
    })
}

/// Publishes the server's port on 127.0.0.1 only, on a port the engine picks: the container's
/// password is well known, so it must not be reachable from the network.
fn publish_on_loopback(config: &mut HostConfig) {
    config.publish_all_ports = Some(false);
    config.port_bindings = Some(HashMap::from([(
        "5432/tcp".to_owned(),
        Some(vec![PortBinding {
            host_ip: Some("127.0.0.1".to_owned()),
            host_port: Some(String::new()),
        }]),
    )]));
}

/// Refuses an image the engine does not have: a missing image would make the engine try a
/// registry.
async fn require_image(docker: &Docker, image: &str) -> Result<(), String> {
    match docker.inspect_image(image).await {
        Ok(_) => Ok(()),
        Err(DockerError::DockerResponseServerError {
            status_code: 404, ..
        }) => Err(format!(
            "the image {image} is not on this Docker engine, and tenure-pg-test never pulls \
             one. Build it with `cargo xtask pg-image --pg-version {}` (from Debian packages, \
             no registry needed), or where a registry can be reached, `docker pull` an image \
             and name it with TENURE_PG_IMAGE (e.g. TENURE_PG_IMAGE=postgres)",
            image.rsplit(':').next().unwrap_or_default()
        )),
        Err(err) => Err(format!("inspecting the image {image}: {err}")),
    }
}

/// Removes the containers of processes of this host that have ended.
async fn remove_stale(docker: &Docker) {
    let filters = HashMap::from([("label", vec![OWNER_LABEL])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let containers = match docker.list_containers(Some(options)).await {
        Ok(containers) => containers,
        Err(err) => {
            eprintln!("tenure-pg-test: listing stale containers: {err}");
            return;
        }
    };
    let this_host = host();
    for container in containers {
        let (Some(id), Some(labels)) = (container.id, container.labels) else {
            continue;
        };
        let Some(owner) = labels.get(OWNER_LABEL) else {
            continue;
        };
        if !is_stale(owner, &this_host, &boot_id(), |pid| {
            std::path::Path::new(&format!("/proc/{pid}")).exists()
        }) {
            continue;
        }
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match docker.remove_container(&id, Some(options)).await {
            Ok(()) => eprintln!("tenure-pg-test: removed stale container {id} of {owner}"),
            Err(err) => eprintln!("tenure-pg-test: removing stale container {id}: {err}"),
        }
    }
}

/// Whether a container owned by `owner` (`<host>/<boot id>/<pid>`) outlived its process: it is
/// of this host, and of an earlier boot or of a process that is gone.
fn is_stale(owner: &str, this_host: &str, this_boot: &str, alive: impl Fn(u32) -> bool) -> bool {
    let mut parts = owner.rsplitn(3, '/');
    let (Some(pid), Some(boot), Some(host)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    host == this_host && (boot != this_boot || !alive(pid))
}

fn owner() -> String {
    format!("{}/{}/{}", host(), boot_id(), std::process::id())
}

fn host() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
}

fn boot_id() -> String {
    read_trimmed("/proc/sys/kernel/random/boot_id")
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Starts the watcher that removes container `id` when this process ends.
fn watch(id: &str) -> Option<Child> {
    if !docker_client_present() {
        eprintln!(
            "tenure-pg-test: no `docker` client on PATH: container {id} stays after this \
             process, until the next run removes it"
        );
        return None;
    }
    Command::new("sh")
        .args(["-c", WATCHER, "tenure-pg-test-watcher", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .inspect_err(|err| {
            eprintln!(
                "tenure-pg-test: cannot start the watcher of container {id} ({err}): it stays \
                 after this process, until the next run removes it"
            );
        })
        .ok()
}

fn docker_client_present() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("docker").is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_containers_of_ended_processes_of_this_host_are_stale() {
        let alive = |pid: u32| pid == 7;
        assert!(!is_stale("vm/boot-a/7", "vm", "boot-a", alive));
        assert!(is_stale("vm/boot-a/8", "vm", "boot-a", alive));
        assert!(is_stale("vm/boot-old/7", "vm", "boot-a", alive));
        assert!(!is_stale("other/boot-a/8", "vm", "boot-a", alive));
        assert!(!is_stale("garbage", "vm", "boot-a", alive));
        assert!(is_stale(
            "host/with/slash/boot-a/8",
            "host/with/slash",
            "boot-a",
            alive
        ));
    }
}
