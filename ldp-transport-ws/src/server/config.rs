//! The server's settings and how a connection ends.

use std::collections::HashMap;
use std::time::Duration;

use ldp_session::AuthenticatedPeer;

use crate::wire::WireError;

/// Server settings of the WebSocket binding.
#[derive(Debug, Clone)]
pub struct WsServerConfig {
    /// Largest text message accepted, in bytes (default 1 MiB, as HTTP's body limit). A larger one is answered with a
    /// `MESSAGE_TOO_LARGE` error frame, then the connection is closed with 1009.
    pub max_message: usize,
    /// Frames queued for one connection's writer (default 64). Replies and updates wait when it is full.
    pub outbound_queue: usize,
    /// Messages of one connection handled at the same time (default 256). The socket is not read while all are busy.
    pub max_in_flight: usize,
    /// Bytes of the messages one connection has in handling at the same time (default 8 MiB): a handler holds its
    /// message, and its answer while that waits for a client that does not read, so a count alone does not bound
    /// memory. The socket is not read while the budget is spent (the client then meets TCP backpressure).
    pub max_in_flight_bytes: usize,
    /// Bytes of the messages all connections have in handling at the same time (default 256 MiB).
    pub max_in_flight_bytes_total: usize,
    /// Bytes per second of inbound messages one principal (its bearer token or certificate, else its address) may
    /// send across all its connections (default 16 MiB/s; 0 turns the budget off), after a burst of as many bytes
    /// or two of the largest messages, whichever is more. Beyond it the principal's sockets are left unread until
    /// the debt drains (TCP backpressure): a flood of large tasks from one peer costs the server this much work per
    /// second and no more, so other clients keep their latency.
    pub max_inbound_rate: u64,
    /// Interval of the server's pings (default 15 s).
    pub ping_interval: Duration,
    /// A connection that sends nothing (not even a pong to the pings) for this long is dead (default 45 s).
    pub idle_timeout: Duration,
    /// Longest time a frame may wait to be queued for a connection, or to be written to its socket (default 30 s).
    /// A client that does not read is closed then; its unwritten task answers are kept for its resume.
    pub write_timeout: Duration,
    /// Bytes of frames queued for one connection's writer (default 4 MiB; a larger frame waits for an empty queue).
    /// With `outbound_queue` it bounds what a client that does not read costs before the write timeout closes it.
    pub max_outbound_bytes: usize,
    /// Origins (`scheme://host[:port]`, or `*`) whose web pages may open a WebSocket. An upgrade with an `Origin`
    /// header that is neither listed nor the server's own (matching `Host`) is refused with 403: otherwise any page
    /// a browser visits could drive a local server. Requests without `Origin` (non-browser clients) are allowed.
    pub allowed_origins: Vec<String>,
    /// Size of each connection's read and write buffers (default 16 KiB; tungstenite's own default of 128 KiB
    /// each makes an idle connection several times heavier). Larger messages still work: the buffers grow.
    pub io_buffer: usize,
    /// Bearer tokens and the identities they authenticate (the same table as HTTP's). When any is set, an upgrade
    /// without a known token is refused with 401 and an LDP error body.
    pub tokens: HashMap<String, AuthenticatedPeer>,
    /// JWT access tokens accepted beside `tokens` (the same validator as HTTP's, sharing its key cache); default
    /// none.
    pub jwt: Option<ldp_edge::JwtAuth>,
}

impl Default for WsServerConfig {
    fn default() -> Self {
        Self {
            max_message: 1024 * 1024,
            outbound_queue: 64,
            max_in_flight: 256,
            max_in_flight_bytes: 8 * 1024 * 1024,
            max_in_flight_bytes_total: 256 * 1024 * 1024,
            max_inbound_rate: 16 * 1024 * 1024,
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
            write_timeout: Duration::from_secs(30),
            max_outbound_bytes: 4 * 1024 * 1024,
            allowed_origins: Vec::new(),
            io_buffer: 16 * 1024,
            tokens: HashMap::new(),
            jwt: None,
        }
    }
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionEnd {
    /// The peer closed it (with this close code, if it sent one) or its stream ended.
    PeerClosed(Option<u16>),
    /// The peer sent a message over the limit; it got a `MESSAGE_TOO_LARGE` error and close code 1009.
    TooLarge,
    /// Nothing arrived within the idle timeout: the peer is dead.
    IdleTimeout,
    /// The peer did not take the server's frames within the write timeout (it does not read): closed without a
    /// close frame, its unwritten task answers kept for its resume.
    WriteTimeout,
    /// The server shut down (close code 1001).
    Shutdown,
    /// Reading or writing failed.
    Failed(WireError),
}
