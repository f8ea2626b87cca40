//! The Prometheus project's own text parser, for the `/metrics` tests (also included by ldp-transport-ws's).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// Parses OpenMetrics text with the Prometheus Python client: `{"name{label=value,...}": value}` per sample.
pub fn parse(text: &str) -> HashMap<String, f64> {
    const PARSER: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        out[f"{s.name}{{{labels}}}"] = s.value
print(json.dumps(out))
"#;
    // Both crates sit at the workspace root.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let py = Command::new("bash").arg(repo.join("scripts/py-tools.sh")).stderr(Stdio::inherit()).output().unwrap();
    assert!(py.status.success(), "scripts/py-tools.sh could not install the Prometheus client (see stderr)");
    let py = String::from_utf8(py.stdout).unwrap().trim().to_owned();
    let mut child = Command::new(py)
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
