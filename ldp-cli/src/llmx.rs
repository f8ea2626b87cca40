//! `ldp llmx ...`: LLMX v1.0 tooling.
//!
//! Diagnostics follow the compiler convention `FILE:LINE:COLUMN: message`, so editors can jump to them. The work is
//! done by [`execute`], which returns what to print, so that it is tested without a process.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ldp_llmx::{BridgeConfig, LlmxError, Message, Parser};

/// LLMX subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LlmxCommand {
    /// Parse a file of LLMX messages and print them as JSON (unknown block types are warned about on stderr).
    Parse {
        /// The LLMX file (`-` for standard input).
        file: PathBuf,
    },
    /// Print the canonical (most compact) text of a file of LLMX messages.
    Fmt {
        /// The LLMX file (`-` for standard input).
        file: PathBuf,
        /// Print nothing; exit 1 if the file is not already canonical.
        #[arg(long)]
        check: bool,
    },
    /// Print the LDP envelopes that the file's LLMX messages bridge to, as a JSON array.
    ToLdp {
        /// The LLMX file (`-` for standard input).
        file: PathBuf,
        /// The LDP session id to put on the envelopes.
        #[arg(long, default_value = "llmx-session")]
        session: String,
        /// The task the messages are about (default: HEADER `b`, or `<f>-<s>` for a REQ).
        #[arg(long)]
        task: Option<String>,
        /// The envelopes' timestamp (default: now).
        #[arg(long)]
        timestamp: Option<String>,
    },
}

/// What a command produced.
#[derive(Debug, Default)]
struct Outcome {
    stdout: String,
    stderr: Vec<String>,
    ok: bool,
}

impl Outcome {
    fn ok(stdout: String, stderr: Vec<String>) -> Self {
        Outcome { stdout, stderr, ok: true }
    }

    fn fail(msg: String) -> Self {
        Outcome { stdout: String::new(), stderr: vec![format!("error: {msg}")], ok: false }
    }
}

/// Runs an LLMX subcommand.
pub fn run(cmd: LlmxCommand) -> ExitCode {
    let input = match input_path(&cmd) {
        p if p == Path::new("-") => {
            let mut buf = Vec::new();
            match std::io::stdin().read_to_end(&mut buf) {
                Ok(_) => Ok(buf),
                Err(e) => Err(format!("stdin: {e}")),
            }
        }
        p => std::fs::read(p).map_err(|e| format!("{}: {e}", p.display())),
    };
    let outcome = match input {
        Ok(bytes) => execute(&cmd, &bytes),
        Err(e) => Outcome::fail(e),
    };
    for line in &outcome.stderr {
        eprintln!("{line}");
    }
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is the reader's choice, not an error worth reporting.
    let written = out.write_all(outcome.stdout.as_bytes()).and_then(|()| out.flush());
    let write_failed = matches!(&written, Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe);
    if outcome.ok && !write_failed { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn input_path(cmd: &LlmxCommand) -> &Path {
    match cmd {
        LlmxCommand::Parse { file } | LlmxCommand::Fmt { file, .. } | LlmxCommand::ToLdp { file, .. } => file,
    }
}

/// Runs `cmd` on the contents of its file.
fn execute(cmd: &LlmxCommand, bytes: &[u8]) -> Outcome {
    let file = input_path(cmd).display().to_string();
    let messages = match Parser::new().parse_bytes(bytes) {
        Ok(m) => m,
        Err(e) => return Outcome::fail(diagnostic(&file, &e)),
    };
    match cmd {
        LlmxCommand::Parse { .. } => {
            let warnings = messages
                .iter()
                .flat_map(Message::warnings)
                .map(|w| format!("{file}: warning: {}", w.msg.unwrap_or_default()))
                .collect();
            match serde_json::to_string_pretty(&messages) {
                Ok(json) => Outcome::ok(json + "\n", warnings),
                Err(e) => Outcome::fail(format!("{file}: {e}")),
            }
        }
        LlmxCommand::Fmt { check, .. } => {
            let canonical = ldp_llmx::write_all(&messages);
            match (check, canonical.as_bytes() == bytes) {
                (false, _) => Outcome::ok(canonical, Vec::new()),
                (true, true) => Outcome::ok(String::new(), Vec::new()),
                (true, false) => {
                    Outcome { stdout: String::new(), stderr: vec![format!("{file}: not in canonical form")], ok: false }
                }
            }
        }
        LlmxCommand::ToLdp { session, task, timestamp, .. } => {
            let timestamp = timestamp
                .clone()
                .unwrap_or_else(|| ldp_types::time::format_timestamp(std::time::SystemTime::now().into()));
            let mut cfg = BridgeConfig::new(session.clone(), timestamp);
            cfg.task_id = task.clone();
            let mut out = Vec::new();
            for m in &messages {
                let envelopes = match ldp_llmx::to_ldp(m, &cfg) {
                    Ok(e) => e,
                    Err(e) => return Outcome::fail(format!("{file}: message with HEADER s:{}: {e}", m.header.seq)),
                };
                for env in envelopes {
                    match env.to_value() {
                        Ok(v) => out.push(v),
                        Err(e) => return Outcome::fail(format!("{file}: {e}")),
                    }
                }
            }
            match serde_json::to_string_pretty(&out) {
                Ok(json) => Outcome::ok(json + "\n", Vec::new()),
                Err(e) => Outcome::fail(format!("{file}: {e}")),
            }
        }
    }
}

fn diagnostic(file: &str, e: &LlmxError) -> String {
    match e {
        LlmxError::Parse { position, kind } => format!("{file}:{}:{}: {kind}", position.line, position.column),
        other => format!("{file}: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOW: &str = "HEADER:{f:Claude,t:Gemini,s:1}\nCTX:{p:myapp}\nREQ:{o:\"implement auth\", pr:2}\n\
                        X_UNKNOWN_TO_NOBODY:{a:1}\nCUSTOM:{a:1}\n\nHEADER:{f:Gemini,t:Claude,s:2,b:Claude-1}\n\
                        END:{n:review,del:[\"src/auth.ts\"]}\n";

    fn path() -> PathBuf {
        PathBuf::from("flow.llmx")
    }

    #[test]
    fn parse_prints_typed_json_and_warns_about_unknown_types() {
        let o = execute(&LlmxCommand::Parse { file: path() }, FLOW.as_bytes());
        assert!(o.ok);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v[0]["header"]["from"], "Claude");
        assert_eq!(v[0]["blocks"][1]["REQ"]["objective"], "implement auth");
        assert_eq!(v[0]["blocks"][1]["REQ"]["priority"], 2);
        assert_eq!(v[1]["blocks"][0]["END"]["deliverables"][0], "src/auth.ts");
        // X_ blocks are ignored silently (spec 8.1), unknown ones with a warning (spec 7.3).
        assert_eq!(o.stderr, vec!["flow.llmx: warning: unknown message type: CUSTOM ignored"]);
    }

    #[test]
    fn parse_error_is_reported_with_line_and_column() {
        let o = execute(&LlmxCommand::Parse { file: path() }, b"HEADER:{f:A,t:B,s:1}\n  REQ:{o:x}\n");
        assert!(!o.ok);
        assert_eq!(o.stderr, vec!["error: flow.llmx:2:3: missing required field 'pr' in REQ"]);
        assert!(o.stdout.is_empty());
    }

    #[test]
    fn fmt_prints_canonical_text_and_check_compares() {
        let o = execute(&LlmxCommand::Fmt { file: path(), check: false }, FLOW.as_bytes());
        assert!(o.ok);
        assert!(
            o.stdout.starts_with("HEADER:{f:Claude,t:Gemini,s:1}\nCTX:{p:myapp}\nREQ:{o:\"implement auth\",pr:2}\n")
        );
        assert!(o.stdout.contains("HEADER:{f:Gemini,t:Claude,s:2,b:\"Claude-1\"}\n"));
        let check = |text: &str| execute(&LlmxCommand::Fmt { file: path(), check: true }, text.as_bytes()).ok;
        assert!(check(&o.stdout));
        assert!(!check(FLOW));
    }

    #[test]
    fn run_reads_real_files() {
        let dir = std::env::temp_dir().join(format!("ldp-llmx-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let canonical = dir.join("canonical.llmx");
        std::fs::write(&canonical, "HEADER:{f:A,t:B,s:1}\nRES:{o:ACK}\n").unwrap();
        let loose = dir.join("loose.llmx");
        std::fs::write(&loose, "HEADER:{f:A, t:B, s:1}\nRES:{o:\"ACK\"}\n").unwrap();
        // --check prints nothing when it passes, so these runs stay quiet.
        assert_eq!(run(LlmxCommand::Fmt { file: canonical, check: true }), ExitCode::SUCCESS);
        assert_eq!(run(LlmxCommand::Fmt { file: loose, check: true }), ExitCode::FAILURE);
        assert_eq!(run(LlmxCommand::Parse { file: dir.join("missing.llmx") }), ExitCode::FAILURE);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn to_ldp_prints_envelopes() {
        let cmd = LlmxCommand::ToLdp {
            file: path(),
            session: "s-1".into(),
            task: None,
            timestamp: Some("2026-03-09T10:00:00Z".into()),
        };
        let o = execute(&cmd, FLOW.as_bytes());
        assert!(o.ok, "{:?}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v[0]["body"]["type"], "TASK_SUBMIT");
        assert_eq!(v[0]["body"]["task_id"], "Claude-1");
        assert_eq!(v[0]["body"]["input"]["instruction"], "implement auth");
        assert_eq!(v[0]["session_id"], "s-1");
        assert_eq!(v[1]["body"]["type"], "TASK_RESULT");
        assert_eq!(v[1]["body"]["task_id"], "Claude-1");
        assert_eq!(v.as_array().unwrap().len(), 2);
    }

    #[test]
    fn to_ldp_explains_what_cannot_be_bridged() {
        let cmd = LlmxCommand::ToLdp { file: path(), session: "s".into(), task: None, timestamp: Some("t".into()) };
        let o = execute(&cmd, b"HEADER:{f:A,t:B,s:7}\nRES:{o:ACK}");
        assert!(!o.ok);
        assert_eq!(
            o.stderr,
            vec![
                "error: flow.llmx: message with HEADER s:7: cannot bridge: RES has no LDP counterpart outside a REQ message"
            ]
        );
    }
}
