//! Codec benchmarks (filled in below in a later commit).
fn main() {}
