//! `ldp`: the command-line tool of the LDP workspace.
//!
//! Each subcommand lives in its own module and owns its arguments, so the protocol layers stay independent here too.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod conformance;
mod demo;
// A server allocates a few short-lived buffers per message; mimalloc serves that pattern markedly better than the
// system allocator (BENCHMARKS.md, ldp-transport-http).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod lctl;
mod llmx;
mod paradox;
mod serve;

/// The LLM Delegate Protocol toolkit.
#[derive(Debug, Parser)]
#[command(name = "ldp", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse, format and bridge LLMX v1.0 text.
    #[command(subcommand)]
    Llmx(llmx::LlmxCommand),
    /// Check, render and acknowledge LCTL v3.0 chain traces.
    #[command(subcommand)]
    Lctl(lctl::LctlCommand),
    /// Reproduce the provenance-paradox routing experiment of the paper.
    Paradox(paradox::ParadoxArgs),
    /// Serve an echo delegate over HTTP (RFC 8), WebSocket (`/ldp/ws`) and optionally TLS.
    // Boxed, like `Conformance`: their many flags make them several times larger than the other commands.
    Serve(Box<serve::ServeArgs>),
    /// Run the end-to-end demo: delegates on loopback, HELLO through SESSION_CLOSE over HTTP or WebSocket.
    Demo(demo::DemoArgs),
    /// Run the conformance kit against an LDP implementation.
    Conformance(Box<conformance::ConformanceArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Llmx(cmd) => llmx::run(cmd),
        Command::Lctl(cmd) => lctl::run(cmd),
        Command::Paradox(args) => paradox::run(args),
        Command::Serve(args) => serve::run(*args),
        Command::Demo(args) => demo::run(args),
        Command::Conformance(args) => conformance::run(*args),
    }
}
