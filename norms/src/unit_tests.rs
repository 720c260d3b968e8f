//! The library's unit tests as a list, for the test binary `tests/unit.rs` (feature
//! `test-hooks`, which only test builds enable: see `Cargo.toml`).
//!
//! Why not `#[cfg(test)]`: a unit-test harness compiles the whole crate a second time, and
//! for this crate (every SIMD kernel for six storage types) that second compilation cost
//! about 830 CPU-seconds of CI's build, on top of the library's own 1080. Compiled into the
//! library instead, the tests keep their access to private items (kernels, scratch, the
//! fused kernels' path counters) and the crate is compiled once per test build.
//!
//! Each test module ends with `register![...]` of its tests: a test left out of that list is
//! an unused function, which `-D warnings` (CI's clippy step) turns into an error.

/// One unit test: its path below the crate (as libtest would name it) and its body, which
/// passes by returning and fails by panicking.
#[derive(Clone, Copy)]
pub struct UnitTest {
    pub name: &'static str,
    pub run: fn(),
}

/// `register![a, b]` in a test module: the `&[UnitTest]` of the functions `a` and `b`, named by
/// their module path.
macro_rules! register {
    ($($test:ident),+ $(,)?) => {
        &[$($crate::unit_tests::UnitTest { name: concat!(module_path!(), "::", stringify!($test)), run: $test }),+]
    };
}
pub(crate) use register;

/// Every unit test of the crate, sorted by name; names start below the crate
/// (`row::fused::tests::...`), as libtest names them.
pub fn all() -> Vec<UnitTest> {
    let mut all: Vec<UnitTest> = [
        crate::accum::tests::TESTS,
        crate::constants::tests::TESTS,
        crate::convert::tests::TESTS,
        crate::element::tests::TESTS,
        crate::nu::activation::tests::TESTS,
        crate::nu::closed::tests::TESTS,
        crate::nu::pipeline::tests::TESTS,
        crate::nu::rng::tests::TESTS,
        crate::nu::sample::tests::TESTS,
        crate::nu::stats::tests::TESTS,
        crate::quadrature::tests::TESTS,
        crate::residual::tests::TESTS,
        crate::weight::lp::tests::TESTS,
    ]
    .concat();
    all.extend(crate::row::unit_tests());
    for t in &mut all {
        t.name = t.name.strip_prefix(concat!(env!("CARGO_CRATE_NAME"), "::")).unwrap_or(t.name);
    }
    all.sort_by_key(|t| t.name);
    all
}
