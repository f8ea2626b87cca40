//! The limit flags of `ldp serve`: connections, timeouts, rates and WebSocket bounds (`LimitArgs`), and the
//! protocol state's bounds (`ProtocolLimitArgs`). [`crate::serve::FLAGS`] maps each onto its key.

/// The connection, timeout and rate flags of `ldp serve` (every one bounds what a peer can hold).
#[derive(Debug, clap::Args)]
pub struct LimitArgs {
    /// Connections open at once (HTTP, TLS handshakes and WebSockets). At the cap, a connection no handler is serving
    /// (idle, handshaking, or still sending its request) is closed to make room: from the address holding the most
    /// connections, the one in that state longest; if there is none, 503 with Retry-After (over TLS, closed).
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub max_connections: usize,
    /// Longest time from the first byte of a request to the end of its headers, and for a TLS handshake, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub header_timeout: u64,
    /// Longest time an HTTP connection may stay open without a request in progress (keep-alive), in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub idle_timeout: u64,
    /// Longest time a request body may take to arrive, in seconds (then 408 and the connection closes).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub body_timeout: u64,
    /// Slowest a request head may arrive, in bytes/s, measured over each --min-rate-window from its first byte;
    /// below it 408 and the connection closes (0: off).
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub min_head_rate: u64,
    /// Slowest a request body may arrive, in bytes/s, measured over each --min-rate-window from the end of the
    /// head; below it 408 and the connection closes (0: off).
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub min_body_rate: u64,
    /// The window the minimum rates are measured over, and the grace before the first check, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub min_rate_window: u64,
    /// Requests allowed per principal (bearer token or client-certificate identity, else client IP): N/s or N/m;
    /// beyond it 429 with Retry-After [default: off].
    #[arg(long, value_name = "N/s")]
    pub rate_limit: Option<ldp_transport_http::RateLimit>,
    /// A proxy (address or network, e.g. 10.0.0.0/8) whose X-Forwarded-For names the client; repeatable. An
    /// unauthenticated peer's quotas are keyed on its client address: list only proxies you run [default: none,
    /// the socket's peer is the client].
    #[arg(long = "trusted-proxy", value_name = "CIDR")]
    pub trusted_proxies: Vec<String>,
    /// A WebSocket that sends nothing, not even a pong to the server's pings, for this long is closed, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 45)]
    pub ws_idle_timeout: u64,
    /// A WebSocket client that does not take the server's frames for this long is closed, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub ws_write_timeout: u64,
    /// Bytes of frames queued for one WebSocket before its writer is waited on.
    #[arg(long, value_name = "BYTES", default_value_t = 4 * 1024 * 1024)]
    pub ws_max_outbound: usize,
    /// Bytes of inbound messages one WebSocket may have in handling at once; beyond it the socket is not read.
    #[arg(long, value_name = "BYTES", default_value_t = 8 * 1024 * 1024)]
    pub ws_max_in_flight: usize,
    /// Bytes per second of WebSocket messages one principal (bearer token or certificate, else client IP) may send
    /// across its connections, after a burst of as many bytes; beyond it its sockets are left unread (0: off).
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    pub ws_max_inbound_rate: u64,
    /// Task results kept per session for a WebSocket client that disconnected (the oldest beyond it are dropped,
    /// and reported on resume as TASK_FAILED RESULT_NOT_KEPT).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub held_results_per_session: usize,
    /// Bytes of task results kept per disconnected session.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024 * 1024)]
    pub held_bytes_per_session: usize,
    /// Task results kept for all disconnected sessions together.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub held_results_total: usize,
    /// Bytes of task results kept for all disconnected sessions together.
    #[arg(long, value_name = "BYTES", default_value_t = 128 * 1024 * 1024)]
    pub held_bytes_total: usize,
    /// A web origin (`scheme://host[:port]`, or `*`) allowed to open /ldp/ws from a browser (repeatable). Other
    /// cross-origin upgrades get 403; clients that send no Origin header, and the server's own origin, are allowed.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
}

/// The protocol-state limits of `ldp serve` (issue 14): beyond them, typed refusals.
#[derive(Debug, clap::Args)]
pub struct ProtocolLimitArgs {
    /// Most sessions held at once; further proposals get SESSION_REJECT CAPACITY_EXCEEDED (retryable).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub max_sessions: usize,
    /// Most sessions one peer holds at once (same refusal).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub max_sessions_per_peer: usize,
    /// Longest identifier accepted (from, to, message_id, session_id, task_id, nonce, skill...), in bytes; longer
    /// ones get 400 MALFORMED_MESSAGE.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub max_id_len: usize,
    /// With --sign: most signed messages of one peer remembered in the replay window (of --replay-entries in all);
    /// beyond it, or beyond the room the window has left, that peer gets CAPACITY_EXCEEDED (retryable), others are
    /// unaffected. A peer is its token or certificate, else its own signing key, else its address: holders of one
    /// shared secret are told apart by address only.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub replay_entries_per_peer: usize,
    /// With --sign: most signed messages remembered in the replay window in all (for its 300 s); beyond it new
    /// messages get CAPACITY_EXCEEDED (retryable), never an old entry evicted.
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pub replay_entries: usize,
}
