//! Starting `ldp serve` as a process for the CLI tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills the server on drop, also when the test fails.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `ldp serve --bind 127.0.0.1:0 ARGS` and returns it with the URL it printed on its `listening on` line.
pub fn serve(args: &[&str], stderr: Stdio) -> (Guard, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ldp"));
    command.args(["serve", "--bind", "127.0.0.1:0"]).args(args).stdout(Stdio::piped()).stderr(stderr);
    serve_command(command)
}

/// Starts an `ldp serve` command built by the caller (stdout piped) and returns it with the URL it printed.
pub fn serve_command(mut command: Command) -> (Guard, String) {
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("ldp serve: listening on ") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
            }
        }
    });
    let url = rx.recv_timeout(Duration::from_secs(30)).expect("ldp serve printed no URL within 30 s");
    (guard, url)
}

/// A directory for one test's files, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ldp-cli-test-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The JSON report at `path` and the ids of its requirements that neither passed nor were skipped (failures,
/// warnings, blocked), with their details.
pub fn read_report(path: &std::path::Path) -> (serde_json::Value, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    let failing = json["requirements"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter(|r| r["outcome"] != "pass" && r["outcome"] != "skipped")
                .map(|r| format!("{} {} {}", r["id"], r["outcome"], r["details"]))
                .collect()
        })
        .unwrap_or_default();
    (json, failing)
}
