//! Token counts of LLMX against the equivalent LDP JSON for the spec's examples, with real tokenizers.
//!
//! Run with: `cargo bench -p ldp-llmx --bench tokens` (prints a Markdown table; no timing).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stdout, missing_docs)]

use ldp_llmx::{BridgeConfig, WriteStyle, parse, to_ldp, write_with};
use tiktoken_rs::CoreBPE;

mod corpus;

struct Counts {
    o200k: usize,
    cl100k: usize,
}

fn count(o200k: &CoreBPE, cl100k: &CoreBPE, text: &str) -> Counts {
    Counts { o200k: o200k.encode_ordinary(text).len(), cl100k: cl100k.encode_ordinary(text).len() }
}

fn main() {
    let o200k = tiktoken_rs::o200k_base().unwrap();
    let cl100k = tiktoken_rs::cl100k_base().unwrap();
    let cfg =
        BridgeConfig::new("550e8400-e29b-41d4-a716-446655440000", "2026-03-09T10:00:00Z").with_task_id("task-001");

    // Columns: the spec's text (which the canonical writer reproduces); the compact writer's text (`fmt --compact`); the LDP envelopes the bridge produces (compact JSON,
    // one per line); the same without the bridge's own `llmx_*` bookkeeping (what a native LDP agent would send for
    // the same content); only their `body` objects (the envelope's ids and timestamp are per-message overhead LLMX
    // does not carry); and the typed model's own JSON view (same content, JSON syntax, long field names).
    println!(
        "| message | LLMX spec text | LLMX compact | LDP envelopes JSON | LDP envelopes, no llmx_* keys | LDP bodies JSON | typed JSON view |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut totals = [0usize; 12];
    let mut bridged_llmx = [0usize; 2];
    for (name, text) in corpus::MESSAGES {
        let m = parse(text).unwrap();
        let compact = write_with(&m, WriteStyle::Compact);
        let view = serde_json::to_string(&m).unwrap();
        let (envelopes, native, bodies) = match to_ldp(&m, &cfg) {
            Ok(envs) => {
                let full: Vec<String> = envs.iter().map(|e| e.to_json().unwrap()).collect();
                let native: Vec<String> = envs
                    .iter()
                    .map(|e| {
                        let mut v = e.to_value().unwrap();
                        strip_bridge_keys(&mut v);
                        v.to_string()
                    })
                    .collect();
                let bodies: Vec<String> = envs.iter().map(|e| e.to_value().unwrap()["body"].to_string()).collect();
                (Some(full.join("\n")), Some(native.join("\n")), Some(bodies.join("\n")))
            }
            Err(_) => (None, None, None),
        };
        let cells = [Some(text.to_string()), Some(compact), envelopes, native, bodies, Some(view)];
        let mut row = format!("| {name} |");
        for (i, cell) in cells.iter().enumerate() {
            match cell {
                Some(t) => {
                    let c = count(&o200k, &cl100k, t);
                    row.push_str(&format!(" {} / {} |", c.o200k, c.cl100k));
                    if envelopes_ok(&cells) {
                        totals[2 * i] += c.o200k;
                        totals[2 * i + 1] += c.cl100k;
                    }
                    if i == 0 && envelopes_ok(&cells) {
                        bridged_llmx = [bridged_llmx[0] + c.o200k, bridged_llmx[1] + c.cl100k];
                    }
                }
                None => row.push_str(" n/a (no LDP counterpart) |"),
            }
        }
        println!("{row}");
    }
    let mut row = "| **total (bridgeable messages)** |".to_owned();
    for i in 0..6 {
        row.push_str(&format!(" **{} / {}** |", totals[2 * i], totals[2 * i + 1]));
    }
    println!("{row}");
    println!();
    for (label, i) in [
        ("LDP envelopes JSON", 2),
        ("LDP envelopes without llmx_* keys", 3),
        ("LDP bodies JSON", 4),
        ("typed JSON view", 5),
    ] {
        println!(
            "{label}: {:.2}x (o200k_base) / {:.2}x (cl100k_base) the tokens of the spec's LLMX text",
            totals[2 * i] as f64 / bridged_llmx[0] as f64,
            totals[2 * i + 1] as f64 / bridged_llmx[1] as f64,
        );
    }
}

fn envelopes_ok(cells: &[Option<String>; 6]) -> bool {
    cells[2].is_some()
}

/// Removes the members the bridge adds for its own round trip (`llmx_header`, `llmx_type`, `llmx_obs`).
fn strip_bridge_keys(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|k, _| !k.starts_with("llmx_"));
            m.values_mut().for_each(strip_bridge_keys);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_bridge_keys),
        _ => {}
    }
}
