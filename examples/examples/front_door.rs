//! Run with: cargo run -p ldp-examples --example front_door
//!
//! A delegate with one custom skill, and a client that holds a two-turn conversation with it: the second call
//! sends only its own input, and the delegate sees the first turn in its session's history (RFC 5.3).

use ldp::{Answer, Delegate, TaskContext};

/// Serves the delegate, holds the conversation, stops the delegate (public so that a test runs it).
#[tokio::main]
pub async fn main() -> Result<(), ldp::Error> {
    // The delegate: each skill declared once, typed input and output.
    let server = Delegate::builder("ldp:delegate:upper")
        .skill("upper", |input: String, cx: TaskContext| async move {
            let earlier: Vec<String> = cx.history().iter().filter_map(|t| t.input.parse().ok()).collect();
            Ok(format!("{} (after: {})", input.to_uppercase(), earlier.join(", ")))
        })
        .spawn("127.0.0.1:0") // or .serve("127.0.0.1:8090") to run until Ctrl-C
        .await?;

    // The client: discovery, the session and its reuse are implicit.
    let upper = ldp::connect(server.url()).await?;
    let first: Answer<String> = upper.call("upper", "hello").await?;
    let second: Answer<String> = upper.call("upper", "again").await?;
    println!("{} / {} (by {})", first.output, second.output, second.provenance.produced_by);
    assert_eq!(second.output, "AGAIN (after: hello)");

    server.shutdown().await
}
