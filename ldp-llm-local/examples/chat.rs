//! Asks a GGUF model one question, streaming its answer: `cargo run -p ldp-llm-local --example chat -- MODEL.gguf
//! "your question"`.

use std::io::Write;

use ldp_llm::{ChatMessage, ChatRequest, LlmBackend, StreamControl};
use ldp_llm_local::{LocalBackend, LocalOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(question)) = (args.next(), args.next()) else {
        eprintln!("usage: chat MODEL.gguf QUESTION");
        std::process::exit(2);
    };
    let started = std::time::Instant::now();
    let model = LocalBackend::load(&path, LocalOptions::default())?;
    eprintln!("loaded {model:?} in {:?}", started.elapsed());
    let request = ChatRequest::new(vec![ChatMessage::user(question)]).with_max_tokens(64);
    let started = std::time::Instant::now();
    let answer = model
        .stream(&request, &mut |piece, _| {
            print!("{piece}");
            let _ = std::io::stdout().flush();
            StreamControl::Continue
        })
        .await?;
    println!();
    eprintln!(
        "{:?}: {:?} tokens in, {:?} out, in {:?}",
        answer.finish,
        answer.usage.input_tokens,
        answer.usage.output_tokens,
        started.elapsed()
    );
    Ok(())
}
