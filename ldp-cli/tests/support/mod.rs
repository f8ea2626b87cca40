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

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv python with the MCP and A2A Python SDKs, installed on first use by `scripts/bridge-sdks.sh` (never
/// skipped: a failed install fails the test).
pub fn bridge_python() -> String {
    let out = Command::new("bash").arg(repo().join("scripts/bridge-sdks.sh")).stderr(Stdio::inherit()).output();
    let out = out.expect("cannot run scripts/bridge-sdks.sh");
    assert!(out.status.success(), "scripts/bridge-sdks.sh could not install the Python SDKs (see stderr)");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Runs `python tests/bridge/SCRIPT ARGS` (at most `limit`) and returns the JSON it printed; fails the test if it
/// fails, runs over, or prints anything else.
pub fn run_bridge_script(script: &str, args: &[String], limit: Duration) -> serde_json::Value {
    use std::io::Read;
    let mut command = Command::new(bridge_python());
    command.arg(repo().join("ldp-cli/tests/bridge").join(script)).args(args);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = pipe.read_to_end(&mut text);
            text
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let mut child = Guard(child);
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < limit, "{script} ran over {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(status.success(), "{script} failed: {stderr}");
    serde_json::from_slice(&stdout).unwrap_or_else(|e| panic!("{script}: {e}: {stderr}"))
}

/// Starts the a2a-sdk test agent (`tests/bridge/a2a_agent.py`) and returns it with its base URL; its markers go to
/// `markers`.
pub fn a2a_agent(markers: &str) -> (Guard, String) {
    let url_file = format!("{markers}/agent-url");
    bridge_server("a2a_agent.py", &[&url_file, markers], &url_file)
}

/// Starts `python tests/bridge/SCRIPT ARGS`, a server that writes its URL to `url_file` once listening, and returns
/// it with that URL (the test fails if none comes within 60 s).
pub fn bridge_server(script: &str, args: &[&str], url_file: &str) -> (Guard, String) {
    let _ = std::fs::remove_file(url_file);
    let child = Command::new(bridge_python())
        .arg(repo().join("ldp-cli/tests/bridge").join(script))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let guard = Guard(child);
    let started = std::time::Instant::now();
    loop {
        if let Ok(url) = std::fs::read_to_string(url_file)
            && !url.is_empty()
        {
            return (guard, url);
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{script} did not start within 60 s");
        std::thread::sleep(Duration::from_millis(50));
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

/// POSTs one message and returns the answer envelope (refusals carry one too); never a 5xx.
pub async fn send(http: &reqwest::Client, url: &str, env: &ldp_types::Envelope) -> ldp_types::Envelope {
    let resp = http
        .post(format!("{url}/ldp/messages"))
        .header("content-type", "application/json")
        .body(env.to_vec().unwrap())
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = resp.status();
    assert!(!status.is_server_error(), "{status}");
    let body = resp.bytes().await.unwrap();
    ldp_types::Envelope::from_slice(&body)
        .unwrap_or_else(|e| panic!("answer {status} is no envelope ({e}): {}", String::from_utf8_lossy(&body)))
}
