//! `ldp inspect`: the web inspector (crate `ldp-inspect`) served on loopback. This module only maps flags onto it,
//! prints the page's URL and opens a browser when asked.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use crate::exit;

/// Serve a web page on loopback that inspects any LDP delegate: its card, calls with streamed output and cancel,
/// the wire log, LCTL chains, the conformance kit.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A delegate to connect to when the page opens (`http(s)://` or `ws(s)://`).
    pub url: Option<String>,
    /// The loopback address to serve the page on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7865")]
    pub bind: SocketAddr,
    /// Open the page in the desktop's browser (xdg-open, open, or $BROWSER) when one is there.
    #[arg(long)]
    pub open: bool,
    /// A bearer token for URL, used when the page's form leaves the token empty (kept out of the page).
    #[arg(long, env = "LDP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Runs `ldp inspect` until SIGINT or SIGTERM.
pub fn run(args: InspectArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ldp inspect: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    runtime.block_on(async move {
        let mut defaults = ldp_inspect::Defaults::default();
        defaults.url = args.url.clone();
        defaults.token = args.token.clone();
        let signal = match ldp::shutdown_signal() {
            Ok(signal) => signal,
            Err(e) => {
                eprintln!("ldp inspect: {e}");
                return ExitCode::from(exit::FAILED);
            }
        };
        let server = match ldp_inspect::serve(args.bind, ldp_inspect::Inspector::new(defaults)).await {
            Ok(server) => server,
            Err(e) => {
                eprintln!("ldp inspect: {e}");
                return ExitCode::from(exit::USAGE);
            }
        };
        let url = server.url();
        println!("ldp inspect: open {url}");
        // Tests and scripts read the URL from a pipe: it must not sit in a buffer.
        let _ = std::io::stdout().flush();
        if args.open {
            open_browser(&url);
        }
        signal.await;
        server.stop();
        ExitCode::from(exit::OK)
    })
}

/// Starts the desktop's browser on `url`, or says why not (the page is still served).
fn open_browser(url: &str) {
    let browser = std::env::var("BROWSER").ok().filter(|b| !b.trim().is_empty());
    let candidates: Vec<String> = browser.into_iter().chain(["xdg-open".to_owned(), "open".to_owned()]).collect();
    for program in &candidates {
        if std::process::Command::new(program)
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .is_ok()
        {
            return;
        }
    }
    eprintln!("ldp inspect: no browser to open ({}): open {url} yourself", candidates.join(", "));
}
