//! `ldp lctl ...`: LCTL v3.0 tooling.
//!
//! Exit codes: 0 when every document is readable and breaks no rule (warnings and notes
//! allowed), 1 when a document fails to parse or breaks a rule, 2 when a file cannot be read.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use ldp_lctl::{
    FailureReport, LctlDocument, MergePoint, ParallelGroup, RenderFormat, Report, Severity, check_chain, parse,
    receive_document, render,
};

/// LCTL subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LctlCommand {
    /// Check documents against the LCTL rules; several files are checked as hops of one chain, in order.
    Check {
        /// LCTL YAML files (`-` reads standard input).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Render a document's trace.
    Render {
        /// An LCTL YAML file (`-` reads standard input).
        file: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Timeline)]
        format: Format,
    },
    /// Run the receiving protocol and print the `lctl_ack` block.
    Ack {
        /// An LCTL YAML file (`-` reads standard input).
        file: PathBuf,
        /// The receiving agent; defaults to the document's `chain.target`.
        #[arg(long)]
        agent: Option<String>,
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

const EXIT_RULES_BROKEN: u8 = 1;
const EXIT_UNREADABLE: u8 = 2;

/// Runs an LCTL subcommand.
pub fn run(cmd: LctlCommand) -> ExitCode {
    match cmd {
        LctlCommand::Check { files } => check(&files),
        LctlCommand::Render { file, format } => match load(&file) {
            Ok(doc) => {
                print!("{}", render(&doc, format.into()));
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        LctlCommand::Ack { file, agent } => ack(&file, agent.as_deref()),
    }
}

fn read(path: &Path) -> Result<String, ExitCode> {
    let result = if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    result.map_err(|err| {
        eprintln!("{}: cannot read: {err}", path.display());
        ExitCode::from(EXIT_UNREADABLE)
    })
}

fn load(path: &Path) -> Result<LctlDocument, ExitCode> {
    let text = read(path)?;
    parse(&text).map_err(|err| {
        eprintln!("{}: error: {err}", path.display());
        ExitCode::from(EXIT_RULES_BROKEN)
    })
}

fn check(files: &[PathBuf]) -> ExitCode {
    let mut documents = Vec::new();
    let mut worst: Option<ExitCode> = None;
    for file in files {
        match load(file) {
            Ok(doc) => documents.push(doc),
            Err(code) => {
                // An unreadable file outranks a broken one.
                if worst.is_none() || code == ExitCode::from(EXIT_UNREADABLE) {
                    worst = Some(code);
                }
            }
        }
    }
    if let Some(code) = worst {
        // With a hop missing, chain comparisons would report nonsense; stop here.
        return code;
    }
    let report = check_chain(&documents);
    print_report(files, &report);
    if report.has_errors() { ExitCode::from(EXIT_RULES_BROKEN) } else { ExitCode::SUCCESS }
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
        Ok(doc) => doc,
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
