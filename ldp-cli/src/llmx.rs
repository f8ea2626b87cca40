//! `ldp llmx ...`: LLMX v1.0 tooling.

use std::process::ExitCode;

/// LLMX subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LlmxCommand {}

/// Runs an LLMX subcommand.
pub fn run(cmd: LlmxCommand) -> ExitCode {
    match cmd {}
}
