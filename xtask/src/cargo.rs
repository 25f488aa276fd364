//! Running cargo from the workspace root, echoing its output and keeping a copy to parse.

use std::env;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The workspace's target directory (`CARGO_TARGET_DIR`, else `target/`).
pub fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

/// `cargo ARGS`, from the workspace root.
pub fn command(args: &[&str]) -> Command {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(workspace_root());
    command
}

/// Runs `cargo ARGS`, its output going straight through.
pub fn run(args: &[&str]) -> Result<(), String> {
    status(&mut command(args))
}

/// Runs a command, its output going straight through; an error unless it succeeds.
pub fn status(command: &mut Command) -> Result<(), String> {
    let shown = shown(command);
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}

/// The outcome of a command whose output was kept.
pub struct Run {
    pub success: bool,
    pub output: String,
}

/// Runs a command, echoing its standard output line by line while keeping a copy to parse.
pub fn tee(mut command: Command) -> Result<Run, String> {
    let shown = shown(&command);
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let mut output = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("reading the output of {shown}: {e}"))?;
            println!("{line}");
            output.push_str(&line);
            output.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {shown}: {e}"))?;
    Ok(Run {
        success: status.success(),
        output,
    })
}

fn shown(command: &Command) -> String {
    let program = Path::new(command.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args: Vec<String> = command
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    format!("{program} {}", args.join(" "))
}
