//! `ldp lctl ...`: LCTL v3.0 tooling.

use std::process::ExitCode;

/// LCTL subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LctlCommand {}

/// Runs an LCTL subcommand.
pub fn run(cmd: LctlCommand) -> ExitCode {
    match cmd {}
}
