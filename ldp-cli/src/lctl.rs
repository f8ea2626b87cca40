//! `ldp lctl ...`: LCTL v3.0 tooling.
//!
//! Exit codes (as every `ldp` command): 0 when every document is readable and breaks no rule (warnings and notes
//! allowed), 1 when a document fails to parse or breaks a rule, 2 when a file cannot be read.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ldp_lctl::{
    FailureReport, LctlAck, LctlDocument, MergePoint, ParallelGroup, RenderFormat, Report, Severity, Value,
    check_chain, parse_yaml_value, receive_document, render,
};

/// LCTL subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LctlCommand {
    /// Check documents against the LCTL rules; several files are checked as hops of one chain, in order.
    Check {
        /// LCTL YAML files (`-` reads standard input).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON object (findings, parallel groups, failures, acks, counts) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Render a document's trace.
    Render {
        /// An LCTL YAML file (`-` reads standard input).
        file: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Timeline)]
        format: Format,
    },
    /// Print a document (or a standalone `lctl_ack` block) as canonical YAML: known keys in the spec's order, then
    /// unknown keys as written. Running it twice gives the same text.
    Fmt {
        /// An LCTL YAML file (`-` reads standard input).
        file: PathBuf,
        /// Print nothing; exit 1 if the file is not already canonical.
        #[arg(long)]
        check: bool,
    },
    /// Run the receiving protocol and print the `lctl_ack` block (a standalone `lctl_ack` block is read, checked and
    /// printed back).
    Ack {
        /// An LCTL YAML file (`-` reads standard input).
        file: PathBuf,
        /// The receiving agent; defaults to the document's `chain.target`.
        #[arg(long)]
        agent: Option<String>,
    },
    /// Send a chain to an OpenTelemetry collector as one trace: a span for the chain, one per step (agent, action,
    /// confidence, duration, facts with their text and confidence as attributes). Several files are the hops of one
    /// chain, in order.
    Export {
        /// The collector's OTLP/HTTP base URL (`/v1/traces` is appended), e.g. http://localhost:4318.
        #[arg(long, value_name = "URL")]
        otlp: String,
        /// LCTL YAML files (`-` reads standard input).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// Rendering formats on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A Mermaid flowchart.
    Mermaid,
    /// A Graphviz digraph.
    Dot,
    /// A plain-text timeline of confidence.
    Timeline,
}

impl From<Format> for RenderFormat {
    fn from(format: Format) -> Self {
        match format {
            Format::Mermaid => RenderFormat::Mermaid,
            Format::Dot => RenderFormat::Dot,
            Format::Timeline => RenderFormat::Timeline,
        }
    }
}

const EXIT_RULES_BROKEN: u8 = crate::exit::FAILED;
const EXIT_UNREADABLE: u8 = crate::exit::USAGE;

/// Runs an LCTL subcommand.
pub fn run(cmd: LctlCommand) -> ExitCode {
    match cmd {
        LctlCommand::Check { files, json } => check(&files, json),
        LctlCommand::Render { file, format } => match load(&file) {
            Ok(Loaded::Document(doc)) => {
                print!("{}", render(&doc, format.into()));
                ExitCode::SUCCESS
            }
            Ok(Loaded::Ack(_)) => {
                eprintln!("{}: error: an lctl_ack block has no trace to render", file.display());
                ExitCode::from(EXIT_RULES_BROKEN)
            }
            Err(code) => code,
        },
        LctlCommand::Fmt { file, check } => fmt(&file, check),
        LctlCommand::Ack { file, agent } => ack(&file, agent.as_deref()),
        LctlCommand::Export { otlp, files } => crate::lctl_export::run(&otlp, &files),
    }
}

/// Loads a document (not a standalone `lctl_ack` block), reporting why not on stderr.
pub(crate) fn load_document(file: &Path) -> Result<LctlDocument, ExitCode> {
    match load(file)? {
        Loaded::Document(doc) => Ok(*doc),
        Loaded::Ack(_) => {
            eprintln!("{}: error: an lctl_ack block has no trace", file.display());
            Err(ExitCode::from(EXIT_RULES_BROKEN))
        }
    }
}

/// Why a file could not be loaded: the exit status it maps to and the message for humans.
struct LoadError {
    code: u8,
    message: String,
}

impl LoadError {
    /// Prints the message and gives the exit status (the text-output commands).
    fn report(self) -> ExitCode {
        eprintln!("{}", self.message);
        ExitCode::from(self.code)
    }
}

fn read(path: &Path) -> Result<String, ExitCode> {
    read_text(path).map_err(LoadError::report)
}

fn read_text(path: &Path) -> Result<String, LoadError> {
    let result = if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    result
        .map_err(|err| LoadError { code: EXIT_UNREADABLE, message: format!("{}: cannot read: {err}", path.display()) })
}

/// What an LCTL file holds.
enum Loaded {
    /// A document, full or minimal.
    Document(Box<LctlDocument>),
    /// A standalone `lctl_ack` block (Receiving Protocol, step 4), without the `lctl:` version key.
    Ack(LctlAck),
}

fn load(path: &Path) -> Result<Loaded, ExitCode> {
    load_quietly(path).map_err(LoadError::report)
}

fn load_quietly(path: &Path) -> Result<Loaded, LoadError> {
    let text = read_text(path)?;
    let fail = |err: ldp_lctl::LctlError| LoadError {
        code: EXIT_RULES_BROKEN,
        message: format!("{}: error: {err}", path.display()),
    };
    let value = parse_yaml_value(&text).map_err(fail)?;
    let standalone_ack = matches!(&value, Value::Mapping(m) if m.get("lctl_ack").is_some() && m.get("lctl").is_none());
    if standalone_ack {
        LctlAck::from_yaml(&text).map(Loaded::Ack).map_err(fail)
    } else {
        LctlDocument::from_value(value).map(|d| Loaded::Document(Box::new(d))).map_err(fail)
    }
}

/// Prints the canonical YAML of `file`'s document, or says why it could not be written.
fn print_yaml(file: &Path, yaml: Result<String, impl std::fmt::Display>) -> ExitCode {
    match yaml {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{}: error: {err}", file.display());
            ExitCode::from(EXIT_RULES_BROKEN)
        }
    }
}

fn fmt(file: &Path, check: bool) -> ExitCode {
    let text = match read(file) {
        Ok(text) => text,
        Err(code) => return code,
    };
    let formatted = match load(file) {
        Ok(Loaded::Document(doc)) => doc.to_yaml(),
        Ok(Loaded::Ack(ack)) => ack.to_yaml(),
        Err(code) => return code,
    };
    match formatted {
        Ok(yaml) if check && yaml != text => {
            eprintln!("{}: not in canonical form", file.display());
            ExitCode::from(EXIT_RULES_BROKEN)
        }
        Ok(_) if check => ExitCode::SUCCESS,
        other => print_yaml(file, other),
    }
}

fn check(files: &[PathBuf], json: bool) -> ExitCode {
    let mut documents = Vec::new();
    let mut doc_files = Vec::new();
    let mut acks = Vec::new();
    let mut worst: Option<LoadError> = None;
    for file in files {
        match load_quietly(file) {
            Ok(Loaded::Document(doc)) => {
                documents.push(*doc);
                doc_files.push(file.clone());
            }
            Ok(Loaded::Ack(ack)) => acks.push(check_ack(file, &ack, documents.last())),
            Err(error) => {
                if !json {
                    eprintln!("{}", error.message);
                }
                // An unreadable file outranks a broken one.
                if worst.as_ref().is_none_or(|w| error.code == EXIT_UNREADABLE && w.code != EXIT_UNREADABLE) {
                    worst = Some(error);
                }
            }
        }
    }
    if let Some(error) = worst {
        // With a hop missing, chain comparisons would report nonsense; stop here.
        if json {
            println!("{}", serde_json::json!({ "ok": false, "error": error.message }));
        }
        return ExitCode::from(error.code);
    }
    let report = check_chain(&documents);
    let ack_errors: usize = acks.iter().map(|a| a.errors.len()).sum();
    let ok = !report.has_errors() && ack_errors == 0;
    if json {
        println!("{}", report_json(&doc_files, &report, &acks, ok));
    } else {
        for ack in &acks {
            ack.print();
        }
        print_report(&doc_files, &report);
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::from(EXIT_RULES_BROKEN) }
}

/// `lctl check --json`: everything the text report says, as one object.
fn report_json(files: &[PathBuf], report: &Report, acks: &[AckCheck], ok: bool) -> serde_json::Value {
    use serde_json::json;
    let name = |index: usize| files.get(index).map_or_else(String::new, |f| f.display().to_string());
    let count = |severity| report.findings.iter().filter(|f| f.severity == severity).count();
    json!({
        "ok": ok,
        "documents": files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
        "findings": report.findings.iter().map(|f| json!({
            "file": name(f.document),
            "severity": f.severity.to_string(),
            "rule": f.rule.name(),
            "path": f.path,
            "message": f.message,
        })).collect::<Vec<_>>(),
        "parallel_groups": report.parallel_groups.iter().map(|(index, group)| json!({
            "file": name(*index),
            "step": group.step,
            "description": describe_group(group),
        })).collect::<Vec<_>>(),
        "failures": report.failures.iter().map(|(index, failure)| json!({
            "file": name(*index),
            "failed_at_step": failure.failed_at_step,
            "agent": failure.agent,
            "error": failure.error,
            "description": describe_failure(failure).trim_end(),
        })).collect::<Vec<_>>(),
        "acks": acks.iter().map(|a| json!({
            "file": a.file,
            "summary": a.summary,
            "errors": a.errors,
        })).collect::<Vec<_>>(),
        "errors": count(Severity::Error),
        "warnings": count(Severity::Warning),
        "notes": count(Severity::Note),
    })
}

/// What checking one standalone `lctl_ack` found.
struct AckCheck {
    file: String,
    summary: String,
    errors: Vec<String>,
}

impl AckCheck {
    fn print(&self) {
        println!("{}: {}", self.file, self.summary);
        for error in &self.errors {
            println!("{}: error [ack] {error}", self.file);
        }
    }
}

/// Checks a standalone `lctl_ack` against the document before it (the one it acknowledges), if any.
fn check_ack(file: &Path, ack: &LctlAck, previous: Option<&LctlDocument>) -> AckCheck {
    let loaded: Vec<&str> = ack.facts_loaded.iter().map(|f| f.as_str()).collect();
    let summary = format!(
        "lctl_ack of chain {} step {} by {} ({}): loaded [{}]",
        ack.chain_id,
        ack.step,
        ack.agent,
        ack.status.as_str(),
        loaded.join(", ")
    );
    let mut errors = Vec::new();
    if let Some(doc) = previous {
        if doc.chain_id().is_some_and(|id| id != ack.chain_id) {
            errors.push(format!(
                "acknowledges chain {} but the document before it is chain {}",
                ack.chain_id,
                doc.chain_id().unwrap_or_default()
            ));
        }
        for id in ack.facts_loaded.iter().chain(&ack.confidence_concerns) {
            if !doc.facts.contains(id) {
                errors.push(format!("{id} is not in the facts registry of the document it acknowledges"));
            }
        }
    }
    AckCheck { file: file.display().to_string(), summary, errors }
}

fn print_report(files: &[PathBuf], report: &Report) {
    let name = |index: usize| files.get(index).map_or_else(String::new, |f| f.display().to_string());
    for finding in &report.findings {
        println!("{}: {finding}", name(finding.document));
    }
    for (index, group) in &report.parallel_groups {
        println!("{}: {}", name(*index), describe_group(group));
    }
    for (index, failure) in &report.failures {
        print!("{}: {}", name(*index), describe_failure(failure));
    }
    let count = |severity| report.findings.iter().filter(|f| f.severity == severity).count();
    println!(
        "{} document(s): {} error(s), {} warning(s), {} note(s)",
        files.len(),
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Note)
    );
}

fn describe_group(group: &ParallelGroup) -> String {
    let agents: Vec<&str> = group.branches.iter().map(|b| b.agent.as_str()).collect();
    let mut text = format!("parallel step {}: {} branches ({})", group.step, agents.len(), agents.join(", "));
    match &group.merge {
        Some(MergePoint::TraceStep { step, agent, conflicts, .. }) => {
            text.push_str(&format!("; merged at step {step} by {agent}"));
            if !conflicts.is_empty() {
                let ids: Vec<&str> = conflicts.iter().map(|c| c.as_str()).collect();
                text.push_str(&format!(" (conflicts: {})", ids.join(", ")));
            }
        }
        Some(MergePoint::Receiver { step, agent }) => {
            text.push_str("; merged by the receiver");
            if let Some(agent) = agent {
                text.push_str(&format!(" {agent}"));
            }
            if let Some(step) = step {
                text.push_str(&format!(" at step {step}"));
            }
        }
        None => text.push_str("; never merged"),
        Some(_) => text.push_str("; merged"),
    }
    text
}

fn describe_failure(failure: &FailureReport) -> String {
    let mut text = format!("chain FAILED at step {}", failure.failed_at_step);
    if let Some(agent) = &failure.agent {
        text.push_str(&format!(" ({agent})"));
    }
    text.push('\n');
    if let Some(action) = &failure.action {
        text.push_str(&format!("  action: {action}\n"));
    }
    if let Some(error) = &failure.error {
        text.push_str(&format!("  error: {error}\n"));
    }
    if !failure.facts_at_failure.is_empty() {
        let ids: Vec<&str> = failure.facts_at_failure.iter().map(|f| f.as_str()).collect();
        text.push_str(&format!("  facts at failure: {}\n", ids.join(", ")));
    }
    if let Some(analysis) = &failure.analysis {
        if let Some(cause) = &analysis.root_cause {
            text.push_str(&format!("  root cause: {cause}\n"));
        }
        if let Some(confidence) = analysis.confidence_in_analysis {
            text.push_str(&format!("  confidence in analysis: {confidence}\n"));
        }
        if let Some(recommendation) = &analysis.recommendation {
            text.push_str(&format!("  recommendation: {recommendation}\n"));
        }
    }
    text
}

fn ack(file: &Path, agent: Option<&str>) -> ExitCode {
    let doc = match load(file) {
        Ok(Loaded::Document(doc)) => *doc,
        Ok(Loaded::Ack(ack)) => {
            // Already an acknowledgement: read, checked by decoding, printed back canonically.
            return print_yaml(file, ack.to_yaml());
        }
        Err(code) => return code,
    };
    let reception = match receive_document(doc, agent) {
        Ok(reception) => reception,
        Err(err) => {
            eprintln!("{}: error: {err}", file.display());
            return ExitCode::from(EXIT_RULES_BROKEN);
        }
    };
    match reception.ack.to_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(err) => {
            eprintln!("{}: error: {err}", file.display());
            return ExitCode::from(EXIT_RULES_BROKEN);
        }
    }
    for concern in &reception.concerns {
        eprintln!(
            "{}: concern: {} has confidence {} ({})",
            file.display(),
            concern.fact,
            concern.confidence,
            concern.advice
        );
    }
    ExitCode::SUCCESS
}
