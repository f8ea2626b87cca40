#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]
//! The decode + encode comparison of the `codec` bench under mimalloc, the allocator the `ldp` binary ships with:
//! this crate, the reference crate and `IgnoredAny` run on the same bytes under the same allocator.
//!
//! Run with: `cargo bench -p ldp-types --bench codec_mimalloc`

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

mod decode_encode;
mod inputs;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn codec(c: &mut Criterion) {
    decode_encode::compare(c, "codec_mimalloc");
}

fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = codec
}
criterion_main!(benches);
