//! `ldp llmx parse` and `ldp llmx to-ldp` run in memory bounded by the largest message, not by the file.
//!
//! Regression test for issue 14 finding 10: a 50 MB LLMX file took 7.1 GB peak RSS (about 140 times its size) when
//! the whole file, every parsed message and every JSON value were held at once. Here a file of about 8 MB must be
//! processed with a peak RSS of the `ldp` process under 64 MiB. Measured on the debug build: the old code peaked at
//! 149 MB (`parse`) and 495 MB (`to-ldp`) on this file, the streaming code at 21-22 MB, the same as on a one-line file.
//!
//! The peak is measured exactly, by the kernel: `python3` runs `ldp` and reports `getrusage(RUSAGE_CHILDREN)`'s
//! `ru_maxrss` (the test suite already needs `python3` for the reference-SDK interop tests; without it this test fails,
//! it does not skip).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

/// Peak RSS allowed for the `ldp` process, in KiB.
const BOUND_KIB: u64 = 64 * 1024;

/// A file of `n` two-message exchanges (a REQ, then its END), about 200 bytes each.
fn big_file(n: usize) -> String {
    let mut text = String::with_capacity(n * 200);
    for i in 0..n {
        let s = 2 * i + 1;
        text.push_str(&format!(
            "HEADER:{{f:Claude,t:Gemini,s:{s},b:B{i}}}\nREQ:{{o:\"implement step {i} of the plan\",pr:2,d:[\"PROJ-{i}\"]}}\n\
             HEADER:{{f:Gemini,t:Claude,s:{},b:B{i}}}\nEND:{{n:\"review {i}\",t:[\"npm test\"],del:[\"src/f{i}.ts\"]}}\n",
            s + 1
        ));
    }
    text
}

/// Runs `ldp ARGS FILE` with stdout discarded; returns its peak RSS in KiB.
fn peak_rss_kib(args: &[&str], file: &str) -> u64 {
    let script = "import resource, subprocess, sys\n\
                  r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n\
                  sys.stderr.write(r.stderr.decode())\n\
                  print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_ldp"))
        .args(["llmx"])
        .args(args)
        .arg(file)
        .output()
        .expect("python3 is needed to measure the peak RSS of ldp (it is also needed by the interop tests)");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut fields = stdout.split_whitespace();
    let code: i32 = fields.next().unwrap_or_else(|| panic!("no report: {stderr}")).parse().unwrap();
    assert_eq!(code, 0, "ldp llmx {args:?} failed: {stderr}");
    // Linux reports ru_maxrss in KiB.
    fields.next().unwrap().parse().unwrap()
}

#[test]
fn parse_and_to_ldp_memory_is_bounded_by_the_message_not_the_file() {
    let dir = support::TempDir::new("llmx-memory");
    let text = big_file(40_000);
    assert!(text.len() > 7_000_000, "{}", text.len());
    let file = dir.write("big.llmx", &text);
    let started = Instant::now();
    for args in [&["parse"][..], &["parse", "--expand"], &["to-ldp", "--timestamp", "2026-03-09T10:00:00Z"]] {
        let peak = peak_rss_kib(args, &file);
        assert!(peak < BOUND_KIB, "ldp llmx {args:?} on {} bytes peaked at {peak} KiB", text.len());
    }
    assert!(started.elapsed() < Duration::from_secs(120), "took {:?}", started.elapsed());
}
