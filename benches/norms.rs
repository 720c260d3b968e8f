//! Criterion benchmarks of the row norms against candle-nn (filled in next commit).
fn main() {}
