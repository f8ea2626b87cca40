//! `ldp llmx ...`: LLMX v1.0 tooling.
//!
//! Diagnostics follow the compiler convention `FILE:LINE:COLUMN: message`, so editors can jump to them. Input is read
//! one message at a time ([`ldp_llmx::MessageReader`]) and output written as each message is done, so that memory is
//! bounded by the largest message, not by the file. The work is done by [`process`], which takes any reader and
//! writer, so that it is tested without a process.

use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ldp_llmx::{Block, BridgeConfig, LlmxError, Message, Parser, SequenceTracker, WriteStyle};

/// LLMX subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LlmxCommand {
    /// Parse a file of LLMX messages and print them as JSON (unknown block types and sequence numbers that do not
    /// increase are warned about on stderr).
    Parse {
        /// The LLMX file (`-` for standard input).
        file: PathBuf,
        /// Expand the shortcuts of section 4: ACT targets become `{text, ops, path, lines}` or `{text, ops,
        /// resource}`, CTX files become `{text, path, lines}`.
        #[arg(long)]
        expand: bool,
        #[command(flatten)]
        limits: Limits,
    },
    /// Print the canonical text of a file of LLMX messages (the spec's syntax: strings quoted, identifiers bare).
    Fmt {
        /// The LLMX file (`-` for standard input).
        file: PathBuf,
        /// Print nothing; exit 1 if the file is not already in this form.
        #[arg(long)]
        check: bool,
        /// Write every plain string bare (fewer tokens; outside the spec's grammar for free text).
        #[arg(long)]
        compact: bool,
        #[command(flatten)]
        limits: Limits,
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
        #[command(flatten)]
        limits: Limits,
    },
}

/// Input limits shared by the subcommands.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct Limits {
    /// The longest message accepted, in bytes (from its HEADER to the next).
    #[arg(long, default_value_t = ldp_llmx::DEFAULT_MAX_MESSAGE_BYTES)]
    max_message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_message_bytes: ldp_llmx::DEFAULT_MAX_MESSAGE_BYTES }
    }
}

/// Why a command failed.
#[derive(Debug)]
enum Failure {
    /// Bad input, said on stderr; exit 1.
    Input(String),
    /// The output could not be written.
    Output(std::io::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Output(e)
    }
}

/// Runs an LLMX subcommand.
pub fn run(cmd: LlmxCommand) -> ExitCode {
    let path = input_path(&cmd);
    if let LlmxCommand::Fmt { check: true, .. } = cmd {
        let bytes = if path == Path::new("-") {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map(|_| buf)
        } else {
            std::fs::read(path)
        };
        let outcome = match bytes {
            Ok(bytes) => execute(&cmd, &bytes),
            Err(e) => {
                // A file named on the command line that cannot be read is a usage error (exit 2), as in every command.
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(crate::exit::USAGE);
            }
        };
        for line in &outcome.stderr {
            eprintln!("{line}");
        }
        return if outcome.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let input: Box<dyn Read> = if path == Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(crate::exit::USAGE);
            }
        }
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut warn = |line: String| eprintln!("{line}");
    let result = process(&cmd, input, &mut out, &mut warn).and_then(|()| out.flush().map_err(Failure::Output));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is the reader's choice, not an error worth reporting.
        Err(Failure::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::FAILURE,
        Err(Failure::Output(e)) => {
            eprintln!("error: writing the output: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Input(msg)) => {
            // What was printed before the error stays printed; the exit status says it is incomplete.
            let _ = out.flush();
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn input_path(cmd: &LlmxCommand) -> &Path {
    match cmd {
        LlmxCommand::Parse { file, .. } | LlmxCommand::Fmt { file, .. } | LlmxCommand::ToLdp { file, .. } => file,
    }
}

/// Writes JSON values as one pretty-printed array, one element at a time (the same text as
/// `serde_json::to_string_pretty` of the whole array).
struct JsonArray<'w, W: Write> {
    out: &'w mut W,
    count: usize,
}

impl<'w, W: Write> JsonArray<'w, W> {
    fn new(out: &'w mut W) -> Self {
        JsonArray { out, count: 0 }
    }

    fn push(&mut self, value: &impl serde::Serialize) -> Result<(), Failure> {
        let text = serde_json::to_string_pretty(value).map_err(|e| Failure::Input(e.to_string()))?;
        self.out.write_all(if self.count == 0 { b"[\n" } else { b",\n" })?;
        for (n, line) in text.lines().enumerate() {
            if n > 0 {
                self.out.write_all(b"\n")?;
            }
            self.out.write_all(b"  ")?;
            self.out.write_all(line.as_bytes())?;
        }
        self.count += 1;
        Ok(())
    }

    fn finish(self) -> Result<(), Failure> {
        self.out.write_all(if self.count == 0 { b"[]\n" } else { b"\n]\n" })?;
        Ok(())
    }
}

/// Runs `cmd` on `input`, writing its output to `out` as it goes and warnings to `warn`.
fn process(
    cmd: &LlmxCommand,
    input: impl Read,
    out: &mut impl Write,
    warn: &mut dyn FnMut(String),
) -> Result<(), Failure> {
    let file = input_path(cmd).display().to_string();
    let limits = match cmd {
        LlmxCommand::Parse { limits, .. } | LlmxCommand::Fmt { limits, .. } | LlmxCommand::ToLdp { limits, .. } => {
            *limits
        }
    };
    let parser = Parser::new().max_message_bytes(limits.max_message_bytes);
    let mut messages = parser.reader(input);
    let mut next = || messages.next().map(|r| r.map_err(|e| Failure::Input(diagnostic(&file, &e))));
    let mut sequence = SequenceTracker::new();
    let mut warn_about = |m: &Message, warn: &mut dyn FnMut(String)| {
        for w in m.warnings().into_iter().chain(sequence.observe(&m.header)) {
            warn(format!("{file}: warning: {}", w.msg.unwrap_or_default()));
        }
    };
    match cmd {
        LlmxCommand::Parse { expand, .. } => {
            let mut array = JsonArray::new(out);
            while let Some(m) = next() {
                let m = m?;
                warn_about(&m, warn);
                if *expand {
                    array.push(&expanded(&m).map_err(|e| Failure::Input(format!("{file}: {e}")))?)?;
                } else {
                    array.push(&m)?;
                }
            }
            array.finish()
        }
        LlmxCommand::Fmt { check: false, compact, .. } => {
            let style = if *compact { WriteStyle::Compact } else { WriteStyle::Canonical };
            let mut text = String::new();
            while let Some(m) = next() {
                text.clear();
                ldp_llmx::write_into_with(&m?, style, &mut text);
                out.write_all(text.as_bytes())?;
            }
            Ok(())
        }
        LlmxCommand::Fmt { check: true, .. } => {
            Err(Failure::Input("internal: fmt --check reads its input whole".into()))
        }
        LlmxCommand::ToLdp { session, task, timestamp, .. } => {
            let timestamp = timestamp
                .clone()
                .unwrap_or_else(|| ldp_types::time::format_timestamp(std::time::SystemTime::now().into()));
            let mut cfg = BridgeConfig::new(session.clone(), timestamp);
            cfg.task_id = task.clone();
            let mut array = JsonArray::new(out);
            while let Some(m) = next() {
                let m = m?;
                warn_about(&m, warn);
                let envelopes = ldp_llmx::to_ldp(&m, &cfg)
                    .map_err(|e| Failure::Input(format!("{file}: message with HEADER s:{}: {e}", m.header.seq)))?;
                for env in envelopes {
                    array.push(&env.to_value().map_err(|e| Failure::Input(format!("{file}: {e}")))?)?;
                }
            }
            array.finish()
        }
    }
}

/// The JSON view of `m` with section 4's shortcuts expanded in ACT targets and CTX files.
fn expanded(m: &Message) -> Result<serde_json::Value, serde_json::Error> {
    let mut v = serde_json::to_value(m)?;
    for (n, block) in m.blocks.iter().enumerate() {
        let slot = &mut v["blocks"][n];
        match block {
            Block::Act(a) => slot["ACT"]["target"] = serde_json::to_value(a.target.expand())?,
            Block::Ctx(c) => {
                if let Some(files) = &c.files {
                    let files = files.iter().map(|f| {
                        let p = ldp_llmx::PathRef::parse(f);
                        let mut e = serde_json::json!({"text": f, "path": p.expanded()});
                        if let Some(l) = p.lines {
                            e["lines"] = serde_json::json!({"start": l.start(), "end": l.end()});
                        }
                        e
                    });
                    slot["CTX"]["files"] = serde_json::Value::Array(files.collect());
                }
            }
            _ => {}
        }
    }
    Ok(v)
}

/// What a command produced, for the tests and for `fmt --check`, which compares with its input whole.
#[derive(Debug, Default)]
struct Outcome {
    #[cfg_attr(not(test), expect(dead_code, reason = "what fmt --check prints is nothing; only the tests read it"))]
    stdout: String,
    stderr: Vec<String>,
    ok: bool,
}

/// Runs `cmd` on the contents of its file, collecting what it prints.
fn execute(cmd: &LlmxCommand, bytes: &[u8]) -> Outcome {
    let file = input_path(cmd).display().to_string();
    let mut stderr = Vec::new();
    let mut stdout = Vec::new();
    let result = match cmd {
        LlmxCommand::Fmt { check: true, compact, limits, .. } => {
            // The canonical text of the whole input is compared with the input; held whole, as the check needs.
            let cmd =
                LlmxCommand::Fmt { file: input_path(cmd).to_owned(), check: false, compact: *compact, limits: *limits };
            process(&cmd, bytes, &mut stdout, &mut |w| stderr.push(w)).and_then(|()| {
                let same = stdout == bytes;
                stdout.clear();
                if same { Ok(()) } else { Err(Failure::Input(format!("{file}: not in canonical form"))) }
            })
        }
        _ => process(cmd, bytes, &mut stdout, &mut |w| stderr.push(w)),
    };
    let ok = match result {
        Ok(()) => true,
        Err(Failure::Input(msg)) => {
            stderr.push(format!("error: {msg}"));
            false
        }
        Err(Failure::Output(e)) => {
            stderr.push(format!("error: writing the output: {e}"));
            false
        }
    };
    Outcome { stdout: String::from_utf8_lossy(&stdout).into_owned(), stderr, ok }
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
        let o =
            execute(&LlmxCommand::Parse { file: path(), expand: false, limits: Limits::default() }, FLOW.as_bytes());
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
        let o = execute(
            &LlmxCommand::Parse { file: path(), expand: false, limits: Limits::default() },
            b"HEADER:{f:A,t:B,s:1}\n  REQ:{o:x}\n",
        );
        assert!(!o.ok);
        assert_eq!(o.stderr, vec!["error: flow.llmx:2:3: missing required field 'pr' in REQ"]);
        assert!(o.stdout.is_empty());
    }

    #[test]
    fn fmt_prints_canonical_text_and_check_compares() {
        let o = execute(
            &LlmxCommand::Fmt { file: path(), check: false, compact: false, limits: Limits::default() },
            FLOW.as_bytes(),
        );
        assert!(o.ok);
        assert!(
            o.stdout.starts_with("HEADER:{f:Claude,t:Gemini,s:1}\nCTX:{p:myapp}\nREQ:{o:\"implement auth\",pr:2}\n")
        );
        assert!(o.stdout.contains("HEADER:{f:Gemini,t:Claude,s:2,b:\"Claude-1\"}\n"));
        // Spec 2.2: "String values use double quotes"; the example of 3.9 writes n:"security review".
        assert!(o.stdout.contains("END:{n:\"review\",del:[\"src/auth.ts\"]}\n"));
        let check = |text: &str| {
            execute(
                &LlmxCommand::Fmt { file: path(), check: true, compact: false, limits: Limits::default() },
                text.as_bytes(),
            )
            .ok
        };
        assert!(check(&o.stdout));
        assert!(!check(FLOW));
    }

    #[test]
    fn run_reads_real_files() {
        let dir = std::env::temp_dir().join(format!("ldp-llmx-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let canonical = dir.join("canonical.llmx");
        std::fs::write(&canonical, "HEADER:{f:A,t:B,s:1}\nRES:{o:\"ACK\"}\n").unwrap();
        let loose = dir.join("loose.llmx");
        std::fs::write(&loose, "HEADER:{f:A, t:B, s:1}\nRES:{o:ACK}\n").unwrap();
        // --check prints nothing when it passes, so these runs stay quiet.
        assert_eq!(
            run(LlmxCommand::Fmt { file: canonical, check: true, compact: false, limits: Limits::default() }),
            ExitCode::SUCCESS
        );
        assert_eq!(
            run(LlmxCommand::Fmt { file: loose, check: true, compact: false, limits: Limits::default() }),
            ExitCode::FAILURE
        );
        assert_eq!(
            run(LlmxCommand::Parse { file: dir.join("missing.llmx"), expand: false, limits: Limits::default() }),
            ExitCode::from(crate::exit::USAGE)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn to_ldp_prints_envelopes() {
        let cmd = LlmxCommand::ToLdp {
            file: path(),
            session: "s-1".into(),
            task: None,
            timestamp: Some("2026-03-09T10:00:00Z".into()),
            limits: Limits::default(),
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
        let cmd = LlmxCommand::ToLdp {
            file: path(),
            session: "s".into(),
            task: None,
            timestamp: Some("t".into()),
            limits: Limits::default(),
        };
        let o = execute(&cmd, b"HEADER:{f:A,t:B,s:7}\nRES:{o:ACK}");
        assert!(!o.ok);
        assert_eq!(
            o.stderr,
            vec![
                "error: flow.llmx: message with HEADER s:7: cannot bridge: RES has no LDP counterpart outside a REQ message"
            ]
        );
    }

    #[test]
    fn fmt_compact_leaves_plain_strings_bare() {
        let cmd = LlmxCommand::Fmt { file: path(), check: false, compact: true, limits: Limits::default() };
        let o = execute(&cmd, b"HEADER:{f:A,t:B,s:1}\nRES:{o:\"ACK\",msg:\"two words\"}");
        assert!(o.ok);
        assert_eq!(o.stdout, "HEADER:{f:A,t:B,s:1}\nRES:{o:ACK,msg:\"two words\"}\n");
        let check = LlmxCommand::Fmt { file: path(), check: true, compact: true, limits: Limits::default() };
        assert!(execute(&check, o.stdout.as_bytes()).ok);
    }

    /// Spec 4: path and operation shortcuts, expanded on request.
    #[test]
    fn parse_expand_expands_shortcuts() {
        let cmd = LlmxCommand::Parse { file: path(), expand: true, limits: Limits::default() };
        let text = "HEADER:{f:A,t:B,s:1}\nCTX:{p:app,f:[\"^/src/db.ts#L3\"]}\nACT:{op:edit,tgt:\"+!p:src/auth.ts#L10-25\"}\n\
                    ACT:{op:shell,tgt:\"npm test\"}";
        let o = execute(&cmd, text.as_bytes());
        assert!(o.ok, "{:?}", o.stderr);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(
            v[0]["blocks"][1]["ACT"]["target"],
            serde_json::json!({"text": "+!p:src/auth.ts#L10-25", "ops": ["add", "force"], "path": "src/auth.ts",
                               "lines": {"start": 10, "end": 25}})
        );
        assert_eq!(
            v[0]["blocks"][2]["ACT"]["target"],
            serde_json::json!({"text": "npm test", "ops": [], "resource": "npm test"})
        );
        assert_eq!(
            v[0]["blocks"][0]["CTX"]["files"][0],
            serde_json::json!({"text": "^/src/db.ts#L3", "path": "../src/db.ts", "lines": {"start": 3, "end": 3}})
        );
        // Without --expand the target is the text as written.
        let plain =
            execute(&LlmxCommand::Parse { file: path(), expand: false, limits: Limits::default() }, text.as_bytes());
        let v: serde_json::Value = serde_json::from_str(&plain.stdout).unwrap();
        assert_eq!(v[0]["blocks"][1]["ACT"]["target"], "+!p:src/auth.ts#L10-25");
    }

    /// Spec 3.1: "Sequence number (monotonic)": a decrease is warned about, not refused.
    #[test]
    fn parse_warns_about_sequence_numbers_that_do_not_increase() {
        let cmd = LlmxCommand::Parse { file: path(), expand: false, limits: Limits::default() };
        let o = execute(&cmd, b"HEADER:{f:A,t:B,s:2}\nHEADER:{f:A,t:B,s:1}\n");
        assert!(o.ok);
        assert_eq!(o.stderr, vec!["flow.llmx: warning: sequence number s:1 from A does not increase (previous s:2)"]);
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 2);
    }

    /// The streamed JSON array is the text `to_string_pretty` gives for the whole array, empty arrays included.
    #[test]
    fn streamed_json_is_the_pretty_array() {
        let cmd = LlmxCommand::Parse { file: path(), expand: false, limits: Limits::default() };
        let o = execute(&cmd, FLOW.as_bytes());
        let messages = ldp_llmx::parse_all(FLOW).unwrap();
        assert_eq!(o.stdout, serde_json::to_string_pretty(&messages).unwrap() + "\n");
        assert_eq!(execute(&cmd, b"  \n").stdout, "[]\n");
    }

    /// A message over --max-message-bytes is refused with its position.
    #[test]
    fn message_size_limit_is_enforced() {
        let cmd = LlmxCommand::Parse { file: path(), expand: false, limits: Limits { max_message_bytes: 100_000 } };
        let text = format!("HEADER:{{f:A,t:B,s:1}}\nRES:{{o:\"{}\"}}\n", "x".repeat(200_000));
        let o = execute(&cmd, text.as_bytes());
        assert!(!o.ok);
        assert_eq!(o.stderr, vec!["error: flow.llmx:1:1: message larger than 100000 bytes"]);
    }
}
