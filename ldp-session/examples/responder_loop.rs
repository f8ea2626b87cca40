#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The `responder` bench's round (TASK_SUBMIT through `Responder::handle`, then `complete_task`) in a plain loop, for
//! instruction counts under callgrind (steadier than wall time on a shared machine):
//!
//! `cargo build --release -p ldp-session --example responder_loop && valgrind --tool=callgrind
//!  --toggle-collect='*run_rounds*' target/release/examples/responder_loop unsigned 5000`
//!
//! Variants: `unsigned`, `signed` (hmac-sha256-jcs on both messages + replay protection).

#[path = "../benches/round/mod.rs"]
mod round;

use std::hint::black_box;

use ldp_types::signing::{SignatureAlgorithm, SigningKey};
use round::{Server, setup};

#[inline(never)]
fn run_rounds(server: &mut Server, inputs: &[Vec<u8>]) {
    for bytes in inputs {
        black_box(server.round(bytes));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let variant = args.get(1).map_or("unsigned", String::as_str);
    let iters: usize = args.get(2).map_or(5_000, |n| n.parse().unwrap());
    let key = match variant {
        "unsigned" => None,
        "signed" => Some(SigningKey::shared_secret(SignatureAlgorithm::HmacSha256Jcs, "k").unwrap()),
        other => panic!("unknown variant {other}"),
    };
    let (mut peer, mut server) = setup(key);
    let inputs: Vec<Vec<u8>> = (0..iters).map(|_| peer.submit()).collect();
    let start = std::time::Instant::now();
    run_rounds(&mut server, &inputs);
    println!("{variant}: {:.3} us per round", start.elapsed().as_secs_f64() * 1e6 / iters as f64);
}
