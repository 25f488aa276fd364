//! A throwaway PostgreSQL cluster of a test's own, which it may restart or crash without
//! disturbing anybody else's tests.
//!
//! It needs PostgreSQL's server binaries (`/usr/lib/postgresql/<version>/bin`, Debian's
//! layout). `initdb` and `postgres` refuse to run as root, so as root the tools run as the
//! `postgres` user through `runuser`, in a directory that user owns. The cluster listens on
//! 127.0.0.1 on a free port, trusts local connections, and is removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How to stop a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopMode {
    /// `pg_ctl -m fast`: clients are disconnected, a checkpoint is written.
    Fast,
    /// `pg_ctl -m immediate`: every server process quits at once, as in a crash; the next
    /// start recovers from the WAL.
    Immediate,
}

/// A cluster in a temporary directory. Dropping it stops it and removes the directory.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl Cluster {
    /// Creates (`initdb`) a cluster on a free port; it is not started yet.
    pub fn create() -> Result<Cluster, String> {
        let bin = server_binaries().ok_or(
            "no PostgreSQL server binaries under /usr/lib/postgresql/<version>/bin \
             (install Debian's postgresql package)",
        )?;
        let cluster = Cluster::empty(bin)?;
        cluster.tool(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "-N",
            ],
        )?;
        Ok(cluster)
    }

    /// Creates a streaming-replication standby of `primary` (which must be running): a base
    /// backup (`pg_basebackup -R`) into a directory of its own, on a free port of its own. It
    /// is not started yet; once started it follows the primary until [promoted](Self::promote).
    pub fn standby_of(primary: &Cluster) -> Result<Cluster, String> {
        let cluster = Cluster::empty(primary.bin.clone())?;
        cluster.tool(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                &cluster.data(),
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
            ],
        )?;
        Ok(cluster)
    }

    /// Appends `name = value` settings to the cluster's `postgresql.conf` (values as written
    /// there, quoted where PostgreSQL needs it); they take effect at the next start or
    /// [reload](Self::reload).
    pub fn configure(&self, settings: &[(&str, &str)]) -> Result<(), String> {
        use std::io::Write as _;
        let path = self.dir.join("data").join("postgresql.conf");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        for (name, value) in settings {
            writeln!(file, "{name} = {value}")
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Gives the server the certificate and key of `ca` and turns TLS on (`ssl = on`), at the
    /// next start or [reload](Self::reload).
    pub fn enable_tls(&self, ca: &crate::tls::TestCa) -> Result<(), String> {
        let data = self.dir.join("data");
        crate::tls::install_private(&ca.server_cert(), &data.join("server.crt"))?;
        crate::tls::install_private(&ca.server_key(), &data.join("server.key"))?;
        if is_root() {
            run(Command::new("chown")
                .args(["postgres:postgres"])
                .arg(data.join("server.crt"))
                .arg(data.join("server.key")))?;
        }
        self.configure(&[("ssl", "on")])
    }

    /// Makes TCP connections authenticate with a password (`scram-sha-256`), at the next start
    /// or [reload](Self::reload); connections on the cluster's Unix socket stay trusted.
    pub fn require_passwords(&self) -> Result<(), String> {
        let path = self.dir.join("data").join("pg_hba.conf");
        std::fs::write(
            &path,
            "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n\
             host all all ::1/128 scram-sha-256\n",
        )
        .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Makes a running server read its configuration again (`pg_ctl reload`).
    pub fn reload(&self) -> Result<(), String> {
        self.tool("pg_ctl", &["-D", &self.data(), "reload"])
    }

    /// Promotes a standby to a primary and waits until it accepts writes (`pg_ctl promote`).
    pub fn promote(&self) -> Result<(), String> {
        self.tool("pg_ctl", &["-D", &self.data(), "-w", "-t", "60", "promote"])
    }

    /// A directory and a free port, owned by the user the tools run as; no data yet.
    fn empty(bin: PathBuf) -> Result<Cluster, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(crate::unique_name("tenure_cluster"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let cluster = Cluster { dir, bin, port };
        if is_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&cluster.dir))?;
        }
        Ok(cluster)
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&self) -> Result<(), String> {
        self.start_with_env(&[])
    }

    /// Starts the server with `env` added to its environment (and `pg_ctl`'s, which passes it
    /// on), for example `LD_PRELOAD` of libfaketime to step its clock; waits until it accepts
    /// connections.
    pub fn start_with_env(&self, env: &[(&str, &str)]) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.tool_with_env(
            env,
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
    }

    /// Stops the server.
    pub fn stop(&self, mode: StopMode) -> Result<(), String> {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        self.tool(
            "pg_ctl",
            &["-D", &self.data(), "-m", mode, "-w", "-t", "60", "stop"],
        )
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A connection URL for the `postgres` user and database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn tool(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        self.tool_with_env(&[], tool, args)
    }

    fn tool_with_env(&self, env: &[(&str, &str)], tool: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(tool);
        let mut command = if is_root() {
            // `env` after `runuser`, so that only the tool (and what it starts) gets it.
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "env"]);
            for (name, value) in env {
                c.arg(format!("{name}={value}"));
            }
            c.arg(program);
            c
        } else {
            let mut c = Command::new(program);
            c.envs(env.iter().copied());
            c
        };
        run(command.args(args))
    }

    /// The server's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop(StopMode::Immediate);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let shown = format!("{command:?}");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn server_binaries() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|p| Path::new(p).join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// Whether this process runs as root (then the cluster's tools run as `postgres`).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}
