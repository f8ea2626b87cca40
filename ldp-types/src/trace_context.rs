//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>) as LDP carries it: the `traceparent` value that names
//! the caller's span, and the opaque `tracestate` beside it.
//!
//! Over HTTP both travel as the standard headers; over WebSocket as envelope members of the same names (see
//! `docs/interop.md`). This module only reads and writes the values: it does no IO and knows no tracing library, so
//! the transports map it onto whichever one they use. A value that does not parse is not an error of the message:
//! the receiver starts a fresh trace and handles the message as usual.

use std::fmt;

/// The HTTP header, and the WebSocket envelope member, carrying a [`TraceParent`].
pub const TRACEPARENT: &str = "traceparent";
/// The HTTP header, and the WebSocket envelope member, carrying the vendor `tracestate` list.
pub const TRACESTATE: &str = "tracestate";
/// The longest `tracestate` kept (the W3C limit for the list: 32 members of at most 256 characters is more than
/// anyone propagates; 512 is what the specification asks every vendor to keep). A longer one is dropped, not cut,
/// since a cut list could end inside a member.
pub const MAX_TRACESTATE_LEN: usize = 512;

/// A parsed `traceparent`: the trace, the caller's span within it, and the trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace id (never all zeros).
    pub trace_id: [u8; 16],
    /// The caller's span id (never all zeros).
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// The `sampled` trace flag.
    pub const SAMPLED: u8 = 0x01;

    /// Reads a `traceparent` value, `None` when it is not one (wrong length or version, upper-case or non-hex
    /// digits, an all-zero id). A version above `00` is read by its version-00 prefix, as the specification asks.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let v = value.trim_matches([' ', '\t']).as_bytes();
        if v.len() < 55 {
            return None;
        }
        let version = hex_byte(v[0], v[1])?;
        // `ff` is forbidden; version 00 has exactly four fields; later versions may append `-...` fields.
        let well_sized = match version {
            0xff => false,
            0x00 => v.len() == 55,
            _ => v.len() == 55 || v[55] == b'-',
        };
        if !well_sized || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
            return None;
        }
        let mut trace_id = [0_u8; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(v[3 + 2 * i], v[4 + 2 * i])?;
        }
        let mut parent_id = [0_u8; 8];
        for (i, byte) in parent_id.iter_mut().enumerate() {
            *byte = hex_byte(v[36 + 2 * i], v[37 + 2 * i])?;
        }
        let flags = hex_byte(v[53], v[54])?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, parent_id, flags })
    }

    /// Whether the caller recorded its span (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        self.flags & Self::SAMPLED != 0
    }
}

/// The version-00 form, `00-<trace id>-<parent id>-<flags>` in lower-case hex.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        for b in self.trace_id {
            write!(f, "{b:02x}")?;
        }
        f.write_str("-")?;
        for b in self.parent_id {
            write!(f, "{b:02x}")?;
        }
        write!(f, "-{:02x}", self.flags)
    }
}

/// A `tracestate` worth passing on: at most [`MAX_TRACESTATE_LEN`] bytes of visible ASCII (the list's alphabet), else
/// `None` (the trace goes on without it).
pub fn tracestate(value: &str) -> Option<&str> {
    let value = value.trim_matches([' ', '\t']);
    let fits = !value.is_empty()
        && value.len() <= MAX_TRACESTATE_LEN
        && value.bytes().all(|b| (0x20..=0x7e).contains(&b) || b == b'\t');
    fits.then_some(value)
}

/// Only lower-case hex digits, as the specification requires.
fn hex_byte(hi: u8, lo: u8) -> Option<u8> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    Some(digit(hi)? << 4 | digit(lo)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specification_example_round_trips() {
        let tp = TraceParent::parse(EXAMPLE).unwrap();
        assert_eq!(tp.trace_id[0], 0x4b);
        assert_eq!(tp.parent_id[7], 0xb7);
        assert!(tp.sampled());
        assert_eq!(tp.to_string(), EXAMPLE);
    }

    #[test]
    fn malformed_values_are_not_trace_parents() {
        let zero_trace = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        let zero_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01";
        let upper = EXAMPLE.to_uppercase();
        let ff = EXAMPLE.replacen("00", "ff", 1);
        let long00 = format!("{EXAMPLE}-x");
        for bad in [
            "",
            "garbage",
            &EXAMPLE[..54],
            zero_trace,
            zero_parent,
            &upper,
            &ff,
            &long00,
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn later_versions_are_read_by_their_prefix() {
        let v1 = format!("01{}-extra", &EXAMPLE[2..]);
        let tp = TraceParent::parse(&v1).unwrap();
        assert_eq!(tp.to_string(), EXAMPLE);
        assert_eq!(TraceParent::parse(&format!("01{}x", &EXAMPLE[2..])), None);
    }

    #[test]
    fn oversized_or_binary_tracestate_is_dropped() {
        assert_eq!(tracestate(" vendor=abc "), Some("vendor=abc"));
        assert_eq!(tracestate(&"a".repeat(MAX_TRACESTATE_LEN + 1)), None);
        assert_eq!(tracestate("a=\u{1}"), None);
        assert_eq!(tracestate(""), None);
    }
}
