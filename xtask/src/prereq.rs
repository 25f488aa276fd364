//! What the suite needs from the machine besides Rust and PostgreSQL, installed on a fresh
//! Debian machine by `cargo xtask test` itself so that the README's one command works there:
//! libfaketime (the clock-step tests preload it into real processes) and the `openssl`
//! command (the TLS tests make their certificate authority with it).
//!
//! Installing needs root and `apt-get`; anywhere else a missing tool is an error that names
//! the package, before anything is built.

use std::path::Path;
use std::process::Command;

/// A tool the suite needs, how to tell it is there, and Debian's package for it.
struct Needed {
    what: &'static str,
    package: &'static str,
    present: fn() -> bool,
}

const NEEDED: &[Needed] = &[
    Needed {
        what: "libfaketime (the clock-step tests)",
        package: "faketime",
        present: libfaketime_present,
    },
    Needed {
        what: "the openssl command (the TLS tests)",
        package: "openssl",
        present: openssl_present,
    },
];

/// Where the tests look for libfaketime (`tenure-reliability/tests/clock_steps.rs`).
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

fn libfaketime_present() -> bool {
    LIBFAKETIME.iter().any(|p| Path::new(p).exists())
}

fn openssl_present() -> bool {
    Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn can_install() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    root && Path::new("/usr/bin/apt-get").exists()
}

/// Installs what is missing, or says what to install.
pub fn ensure() -> Result<(), String> {
    let missing: Vec<&Needed> = NEEDED.iter().filter(|n| !(n.present)()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
    let what: Vec<&str> = missing.iter().map(|n| n.what).collect();
    if !can_install() {
        return Err(format!(
            "the suite needs {} : install Debian's {} (apt-get install {})",
            what.join(" and "),
            packages.join(", "),
            packages.join(" ")
        ));
    }
    println!(
        "xtask: installing {} from Debian's packages (for {})",
        packages.join(", "),
        what.join(" and ")
    );
    let update = Command::new("apt-get").args(["update", "-qq"]).status();
    let install = Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    match (update, install) {
        (Ok(_), Ok(status)) if status.success() => {}
        (_, Ok(status)) => {
            return Err(format!(
                "apt-get install {} failed: {status}",
                packages.join(" ")
            ));
        }
        (_, Err(e)) => return Err(format!("cannot run apt-get: {e}")),
    }
    match missing.iter().find(|n| !(n.present)()) {
        Some(still) => Err(format!(
            "{} is still missing after installing it",
            still.what
        )),
        None => Ok(()),
    }
}
