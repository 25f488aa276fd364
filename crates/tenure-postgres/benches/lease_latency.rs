//! Placeholder: the lease latency benchmark.

fn main() {}
