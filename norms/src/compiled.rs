//! The heavy generic entry points, compiled once, in this crate, for every storage type.
//!
//! Rust compiles a generic function again in every crate that calls it with a concrete type
//! (in optimised builds crates do not share instances). The row and batch kernels are large:
//! explicit SIMD, four accumulators, two instruction-set versions. So normlab's library, its
//! unit-test binary, and the integration tests of this crate and of normlab-kernels each
//! compiled them again: in CI's cold build that was most of those four units' 240-370 s each.
//!
//! [`crate::row::forward`] and the other public generic functions named here do nothing but
//! call a method of this trait; each storage type's method is an ordinary function compiled
//! here, which the other crates link instead of compiling. `#[inline(never)]` keeps rustc
//! from making these small forwarding functions inlinable across crates, which would bring
//! the instances back. They run once per call (per tensor), not per row.
//!
//! The trait is a supertrait of [`crate::Element`], implemented for the same six storage
//! types; it is not part of the API.

use crate::accum::Accum;
use crate::batch::{Layout, Mode, RunningStats};
use crate::counters::Counters;
use crate::error::Result;
use crate::row::RowStats;
use crate::spec::NormSpec;

/// Entry points compiled in this crate for `Self` as storage (module doc).
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub trait Compiled: Sized {
    /// [`crate::row::forward`].
    fn row_forward(
        spec: &NormSpec,
        accum: Accum,
        x: &[Self],
        n: usize,
        weight: Option<&[Self]>,
        bias: Option<&[Self]>,
        y: &mut [Self],
        stats: Option<&mut [RowStats]>,
    ) -> Result<Counters>;

    /// [`crate::row::backward`].
    fn row_backward(
        spec: &NormSpec,
        accum: Accum,
        x: &[Self],
        dy: &[Self],
        n: usize,
        stats: &[RowStats],
        weight: Option<&[Self]>,
        dx: &mut [Self],
        dweight: Option<&mut [Self]>,
        dbias: Option<&mut [Self]>,
    ) -> Result<Counters>;

    /// [`crate::batch::forward`].
    fn batch_forward(
        spec: &NormSpec,
        accum: Accum,
        layout: Layout,
        x: &[Self],
        weight: Option<&[Self]>,
        bias: Option<&[Self]>,
        y: &mut [Self],
        mode: Mode,
        running: Option<&mut RunningStats>,
        stats: Option<&mut [RowStats]>,
    ) -> Result<Counters>;

    /// [`crate::batch::backward`].
    fn batch_backward(
        spec: &NormSpec,
        accum: Accum,
        layout: Layout,
        x: &[Self],
        dy: &[Self],
        mode: Mode,
        stats: &[RowStats],
        weight: Option<&[Self]>,
        dx: &mut [Self],
        dweight: Option<&mut [Self]>,
        dbias: Option<&mut [Self]>,
    ) -> Result<Counters>;

    /// [`crate::batch::mean_only::forward`].
    fn mean_only_forward(
        accum: Accum,
        layout: Layout,
        x: &[Self],
        bias: Option<&[Self]>,
        y: &mut [Self],
        mode: Mode,
        running: Option<&mut RunningStats>,
    ) -> Result<Counters>;

    /// [`crate::batch::mean_only::backward`].
    fn mean_only_backward(
        accum: Accum,
        layout: Layout,
        dy: &[Self],
        mode: Mode,
        dx: &mut [Self],
        dbias: Option<&mut [Self]>,
    ) -> Result<Counters>;
}

macro_rules! compiled_for {
    ($($t:ty),* $(,)?) => {$(
        impl Compiled for $t {
            #[inline(never)]
            fn row_forward(
                spec: &NormSpec, accum: Accum, x: &[Self], n: usize, weight: Option<&[Self]>,
                bias: Option<&[Self]>, y: &mut [Self], stats: Option<&mut [RowStats]>,
            ) -> Result<Counters> {
                crate::row::forward_generic(spec, accum, x, n, weight, bias, y, stats)
            }

            #[inline(never)]
            fn row_backward(
                spec: &NormSpec, accum: Accum, x: &[Self], dy: &[Self], n: usize, stats: &[RowStats],
                weight: Option<&[Self]>, dx: &mut [Self], dweight: Option<&mut [Self]>, dbias: Option<&mut [Self]>,
            ) -> Result<Counters> {
                crate::row::backward_generic(spec, accum, x, dy, n, stats, weight, dx, dweight, dbias)
            }

            #[inline(never)]
            fn batch_forward(
                spec: &NormSpec, accum: Accum, layout: Layout, x: &[Self], weight: Option<&[Self]>,
                bias: Option<&[Self]>, y: &mut [Self], mode: Mode, running: Option<&mut RunningStats>,
                stats: Option<&mut [RowStats]>,
            ) -> Result<Counters> {
                crate::batch::forward_generic(spec, accum, layout, x, weight, bias, y, mode, running, stats)
            }

            #[inline(never)]
            fn batch_backward(
                spec: &NormSpec, accum: Accum, layout: Layout, x: &[Self], dy: &[Self], mode: Mode,
                stats: &[RowStats], weight: Option<&[Self]>, dx: &mut [Self], dweight: Option<&mut [Self]>,
                dbias: Option<&mut [Self]>,
            ) -> Result<Counters> {
                crate::batch::backward_generic(spec, accum, layout, x, dy, mode, stats, weight, dx, dweight, dbias)
            }

            #[inline(never)]
            fn mean_only_forward(
                accum: Accum, layout: Layout, x: &[Self], bias: Option<&[Self]>, y: &mut [Self], mode: Mode,
                running: Option<&mut RunningStats>,
            ) -> Result<Counters> {
                crate::batch::mean_only::forward_generic(accum, layout, x, bias, y, mode, running)
            }

            #[inline(never)]
            fn mean_only_backward(
                accum: Accum, layout: Layout, dy: &[Self], mode: Mode, dx: &mut [Self], dbias: Option<&mut [Self]>,
            ) -> Result<Counters> {
                crate::batch::mean_only::backward_generic(accum, layout, dy, mode, dx, dbias)
            }
        }
    )*};
}

compiled_for!(f64, f32, half::f16, half::bf16, float8::F8E4M3, float8::F8E5M2);
