//! Bridges between LDP and the other agent protocols, above the session layer.
//!
//! ```text
//!   MCP host ──(Streamable HTTP /mcp, or stdio)──► mcp::LdpTools ──► ldp_session::runtime::Client ──► Responder
//!                                                   tools/call = one LDP task in the MCP session's LDP session
//!   A2A client ──(JSON-RPC /a2a, SSE)────────────► a2a::routes ───► ldp_session::runtime::Client ──► Responder
//!                                                   SendMessage = one LDP task in the contextId's LDP session
//!   Responder ──► mcp::McpDelegate ──(stdio)──► MCP server      (ldp serve --backend mcp)
//!   Responder ──► a2a::A2aDelegate ──(JSON-RPC, SSE)──► A2A agent (ldp serve --backend a2a)
//! ```
//!
//! A bridge never implements an LDP rule itself: it is an LDP *initiator* like any other, built from the session
//! layer's [`Client`](ldp_session::runtime::Client) over a [`Transport`](ldp_session::runtime::Transport) (in process
//! with [`MemoryTransport`](ldp_session::runtime::MemoryTransport) for `ldp serve --mcp`, over HTTP for
//! `ldp mcp-proxy`), so sessions, trust, budgets, cancellation and provenance are the machines' own. What the other
//! protocol has room for (MCP's `_meta`, structured content, progress notifications) carries LDP's identity,
//! provenance and typed errors; `docs/bridges.md` maps the concepts and lists what is lost each way.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod a2a;
mod error;
pub mod mcp;
mod upstream;

pub use error::BridgeError;
pub use upstream::{A2A_BRIDGE_ID, BRIDGE_ID, InProcess, Remote, Upstream};
