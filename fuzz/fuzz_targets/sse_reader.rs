//! The SSE reader: any byte stream, cut into chunks anywhere, gives the same events as the whole stream at once
//! (and as one byte at a time), never a panic.
//!
//! Input: four selector bytes (the chunk lengths, used in turn; 0 is an empty chunk), then the stream.
#![no_main]

use ldp_fuzz::split_selector;
use ldp_transport_http::sse::{SseEvent, SseParser};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (lengths, stream) = split_selector::<4>(data);
    let whole = SseParser::default().push(stream).expect("within the default limit");

    let mut parser = SseParser::default();
    let mut chunked: Vec<SseEvent> = Vec::new();
    let mut rest = stream;
    for &length in lengths.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at(usize::from(length).min(rest.len()));
        chunked.extend(parser.push(chunk).expect("within the default limit"));
        rest = tail;
        if length == 0 {
            // An empty chunk; then one byte, so that the loop ends.
            chunked.extend(parser.push(&[]).expect("within the default limit"));
            let (chunk, tail) = rest.split_at(1);
            chunked.extend(parser.push(chunk).expect("within the default limit"));
            rest = tail;
        }
    }
    assert_eq!(chunked, whole, "events depend on where the stream was cut ({lengths:?})");

    let mut parser = SseParser::default();
    let bytewise: Vec<SseEvent> =
        stream.iter().flat_map(|b| parser.push(std::slice::from_ref(b)).expect("within the default limit")).collect();
    assert_eq!(bytewise, whole, "events differ when read one byte at a time");
});
