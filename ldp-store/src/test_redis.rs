//! A throwaway `redis-server` for tests (feature `test-redis`): on a free loopback port, without persistence,
//! killed on drop. The binary comes from `scripts/redis-server.sh`, which installs Debian's package when it is
//! missing; tests that use this never skip.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server` child process.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    binary: PathBuf,
}

/// Why a test server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestRedisError {
    /// `scripts/redis-server.sh` failed (its message is on stderr).
    #[error("scripts/redis-server.sh could not provide redis-server: {0}")]
    Install(String),
    /// The server did not start or did not listen in time.
    #[error("redis-server did not start: {0}")]
    Start(String),
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers.
    pub fn start() -> Result<Self, TestRedisError> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-server.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| TestRedisError::Install(e.to_string()))?;
        if !out.status.success() {
            return Err(TestRedisError::Install(format!("exit status {}", out.status)));
        }
        let binary = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let port = free_port().map_err(|e| TestRedisError::Start(e.to_string()))?;
        let mut server = Self { child: None, port, binary };
        server.restart()?;
        Ok(server)
    }

    /// The server's URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server (SIGKILL), as an outage.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: it keeps nothing on disk).
    pub fn restart(&mut self) -> Result<(), TestRedisError> {
        self.stop();
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TestRedisError::Start(e.to_string()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(TestRedisError::Start(format!("nothing listens on port {} after 10 s", self.port)))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
