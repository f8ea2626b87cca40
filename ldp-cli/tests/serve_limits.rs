//! `ldp serve`'s connection flags as a process over real sockets: the rate limit answers 429 with Retry-After,
//! the connection cap answers 503 when no connection is quiet, idle sockets are closed at `--idle-timeout`, cross-origin WebSocket upgrades are
//! refused unless `--allow-origin` lists them, and bad values fail cleanly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::serve;

/// Sends `request` on a new connection and reads until the server closes it (at most `within`).
fn exchange(addr: &str, request: &str, within: Duration) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    read_until_closed(&mut s, within)
}

fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (String::from_utf8_lossy(&got).into_owned(), false);
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return (String::from_utf8_lossy(&got).into_owned(), false);
            }
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), true),
        }
    }
}

fn status(response: &str) -> u16 {
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn the_limit_flags_bound_rate_connections_idle_sockets_and_origins() {
    let (_server, url) = serve(
        &[
            "--rate-limit",
            "3/s",
            "--max-connections",
            "3",
            "--idle-timeout",
            "1",
            "--allow-origin",
            "http://app.example",
        ],
        Stdio::piped(),
    );
    let addr = url.trim_start_matches("http://").to_owned();
    let get = "GET /ldp/identity HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    let statuses: Vec<u16> = (0..4).map(|_| status(&exchange(&addr, get, Duration::from_secs(5)).0)).collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    let (over, _) = exchange(&addr, get, Duration::from_secs(5));
    assert!(over.to_ascii_lowercase().contains("retry-after:"), "{over}");
    assert!(over.contains("CAPACITY_EXCEEDED"), "{over}");
    std::thread::sleep(Duration::from_millis(1100));

    // Origins: refused cross-origin, allowed when listed.
    let upgrade = |origin: &str| {
        format!(
            "GET /ldp/ws HTTP/1.1\r\nhost: {addr}\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n\
             sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\norigin: {origin}\r\n\r\n"
        )
    };
    assert_eq!(status(&exchange(&addr, &upgrade("http://evil.example"), Duration::from_secs(2)).0), 403);
    assert_eq!(status(&exchange(&addr, &upgrade("http://app.example"), Duration::from_secs(2)).0), 101);
    std::thread::sleep(Duration::from_millis(1100));

    // Three requests whose bodies never come take every slot. No handler has them yet, so the fourth connection
    // closes one to make room and is let in (and then meets the rate limit the three heads used up), not 503.
    let post = "POST /ldp/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n";
    let busy: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(post.as_bytes()).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (admitted, _) = exchange(&addr, get, Duration::from_secs(2));
    assert!([200, 429].contains(&status(&admitted)), "{admitted}");
    drop(busy);
    std::thread::sleep(Duration::from_millis(1100));

    // An idle socket is closed at --idle-timeout.
    let started = Instant::now();
    let mut idle = TcpStream::connect(&addr).unwrap();
    let (_, closed) = read_until_closed(&mut idle, Duration::from_secs(5));
    assert!(closed, "an idle socket outlived --idle-timeout 1 ({:?})", started.elapsed());
    assert_eq!(status(&exchange(&addr, get, Duration::from_secs(5)).0), 200);
}

#[test]
fn bad_limit_flags_fail_cleanly() {
    for args in [&["--rate-limit", "0/s"][..], &["--rate-limit", "fast"], &["--max-connections", "-1"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_ldp")).arg("serve").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
}
