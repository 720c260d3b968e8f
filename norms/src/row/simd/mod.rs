//! Sixteen f32 lanes in explicit SIMD registers, and the storage types they load and store.
//!
//! The crate's lane reductions (`crate::lanes`) keep 16 independent accumulators, lane j
//! taking elements j, j + 16, j + 32, ... in order. [`F32x16`] is exactly one such set of
//! lanes: two AVX registers ([`avx2::Avx2`]) or one AVX-512 register ([`avx512::Avx512`]).
//! Its operations are the IEEE single operations the scalar code performs (no fused
//! multiply-add, no reassociation), so a reduction written with it gives, lane by lane, the
//! same bits as the generic code, and so does the final pairwise combine
//! (`crate::lanes::combine` on [`F32x16::to_array`]). Where the lanes sit in the registers is
//! the implementation's business: [`avx2_even_odd::Avx2EvenOdd`] keeps the even and the odd
//! lanes apart, for bf16.
//!
//! Safety: a value of an implementing type can only be made by the `unsafe` constructors
//! ([`F32x16::splat`] and the loads), whose contract is that the CPU has the instruction set
//! the type uses. The safe methods on an existing value rely on that.

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2_even_odd;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
#[cfg(target_arch = "x86_64")]
mod sort16;
#[cfg(target_arch = "x86_64")]
mod sort16_avx512;
#[cfg(target_arch = "x86_64")]
pub(crate) mod top_k_avx2;
#[cfg(target_arch = "x86_64")]
mod top_k_avx512;

use std::ops::{Add, Mul, Sub};

use half::{bf16, f16};

use crate::element::Element;

/// Number of lanes of [`F32x16`] (the crate's `lanes::LANES`).
pub(crate) const W: usize = 16;

/// Sixteen f32 lanes. Arithmetic is lane-wise and correctly rounded, as in scalar f32.
pub(crate) trait F32x16: Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> {
    /// # Safety
    /// The CPU has the instruction set of the implementing type.
    unsafe fn splat(v: f32) -> Self;
    /// # Safety
    /// As [`F32x16::splat`], and `p` is valid for reading 16 values.
    unsafe fn load_f32(p: *const f32) -> Self;
    /// Widen 16 f16 values (bits) exactly.
    /// # Safety
    /// As [`F32x16::load_f32`].
    unsafe fn load_f16(p: *const u16) -> Self;
    /// Widen 16 bf16 values (bits) exactly.
    /// # Safety
    /// As [`F32x16::load_f32`].
    unsafe fn load_bf16(p: *const u16) -> Self;
    /// # Safety
    /// `p` is valid for writing 16 values.
    unsafe fn store_f32(self, p: *mut f32);
    /// Round to f16 (nearest even), as `convert::f32_to_f16`.
    /// # Safety
    /// As [`F32x16::store_f32`].
    unsafe fn store_f16(self, p: *mut u16);
    /// Round to bf16 (nearest even, NaN kept quiet), as `convert::f32_to_bf16`.
    /// # Safety
    /// As [`F32x16::store_f32`].
    unsafe fn store_bf16(self, p: *mut u16);
    /// [`F32x16::store_bf16`] without its NaN case: the same bits for every lane that is not
    /// NaN, garbage for a NaN lane. Three instructions per register fewer; the caller redoes
    /// the row with the exact form when a NaN may have occurred.
    /// # Safety
    /// As [`F32x16::store_f32`].
    unsafe fn store_bf16_non_nan(self, p: *mut u16);
    /// The four stores above as non-temporal (streaming) stores: the same bits, written
    /// around the caches, for outputs too large to stay in them (no read-for-ownership of the
    /// destination line). Weakly ordered: the caller ends its task with [`sfence`].
    /// # Safety
    /// As [`F32x16::store_f32`], and `p` is aligned to the 16 values' size (64 bytes for f32,
    /// 32 for f16/bf16).
    unsafe fn store_f32_nt(self, p: *mut f32);
    /// # Safety
    /// As [`F32x16::store_f32_nt`].
    unsafe fn store_f16_nt(self, p: *mut u16);
    /// # Safety
    /// As [`F32x16::store_f32_nt`].
    unsafe fn store_bf16_nt(self, p: *mut u16);
    /// # Safety
    /// As [`F32x16::store_f32_nt`].
    unsafe fn store_bf16_non_nan_nt(self, p: *mut u16);
    /// Whether lane j is held elsewhere than at register position j
    /// ([`avx2_even_odd::Avx2EvenOdd`]), so that [`F32x16::load_f32`] must rearrange. f32
    /// vectors read again for every row (an affine weight and bias) are then stored in
    /// register order once, by [`F32x16::store_lanes`], and read by [`F32x16::load_lanes`].
    const REORDERS: bool = false;
    /// Store the registers as they are (16 f32), for [`F32x16::load_lanes`]: the values in
    /// register order, which is memory order unless [`F32x16::REORDERS`].
    /// # Safety
    /// As [`F32x16::store_f32`].
    #[inline(always)]
    unsafe fn store_lanes(self, p: *mut f32) {
        self.store_f32(p)
    }
    /// Load 16 f32 that [`F32x16::store_lanes`] stored (plain loads).
    /// # Safety
    /// As [`F32x16::load_f32`].
    #[inline(always)]
    unsafe fn load_lanes(p: *const f32) -> Self {
        Self::load_f32(p)
    }
    /// `|v|` (clears the sign bit).
    fn abs(self) -> Self;
    /// `1`, `-1` or `0` lane-wise as the value is above, below or neither (zero, NaN): the
    /// scalar `sign` of the generic row backward, whose L1 and Top-k gradients use sign(0) = 0.
    /// Through memory here; one or two instructions per register in the layouts the fused
    /// backward runs (`fused_backward`).
    #[inline(always)]
    fn sign(self) -> Self {
        let a = self.to_array().map(|v| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { 0.0 });
        // SAFETY: a value of this type exists only where its instruction set was detected.
        unsafe { Self::load_f32(a.as_ptr()) }
    }
    /// `if a > m { a } else { m }` lane-wise: the step of `lanes::max_map` (a NaN in `a` is
    /// skipped, exactly as there).
    fn max_gt(a: Self, m: Self) -> Self;
    /// `if a < m { a } else { m }` lane-wise (a NaN in `a` is skipped).
    fn min_lt(a: Self, m: Self) -> Self;
    /// Lanes `j < count` from `a`, the others from `b` (the tail of a row: lanes past the
    /// row's end keep their accumulator).
    fn select_first(count: usize, a: Self, b: Self) -> Self;
    /// Lane-wise maximum of `self` and the bits of `|v|` as integers (both read as i32 bit
    /// patterns; `self` starts as `splat(0.0)`). Finite f32 bit patterns are ordered like the
    /// magnitudes, and NaN and infinity lie above every finite value: the result tells whether
    /// some `v` was non-finite or larger than a bound, in two instructions per register.
    fn max_abs_bits(self, v: Self) -> Self;
    /// Bit j set when lane j is `>= t` (an ordered comparison: NaN lanes are clear).
    fn ge_mask(self, t: Self) -> u32;
    fn to_array(self) -> [f32; W];
    /// `lanes::combine(self.to_array())`: the 16 lanes summed by halving (lane j plus lane
    /// j + 8, then j + 4, j + 2, j + 1), the same additions in the same order, so the same
    /// bits. In registers where the layout allows (four adds and three shuffles instead of a
    /// store and fifteen scalar adds).
    #[inline(always)]
    fn combine(self) -> f32 {
        crate::lanes::combine(self.to_array())
    }
    /// The k-th largest (1 <= k <= 16, counted with multiplicity) of the 16 lanes, which are
    /// magnitudes (sign clear, never NaN): the value `rank_select::kth_largest_of_16` gives.
    #[inline(always)]
    fn kth_largest_magnitude(self, k: usize) -> f32 {
        crate::row::rank_select::kth_largest_of_16(self.to_array(), k)
    }
    /// `a.ge_mask(t) | b.ge_mask(t) << 16`: the marks of two groups of 16 in one word, bit b
    /// for value b of the 32 that `a` and then `b` hold in memory order.
    #[inline(always)]
    fn ge_mask_2(a: Self, b: Self, t: Self) -> u32 {
        a.ge_mask(t) | b.ge_mask(t) << 16
    }
    /// One marked lane of Top-k's gather (`fused::gather_marked`): of the four values
    /// `x[16 q]`, q < 4, the `z = |fl(fl(v - hi) - lo)|` that are `>= t0` (an ordered
    /// comparison), stored to `out` in that order; returns how many. Writes all of `out[..4]`
    /// (past the count, values to be overwritten). Uncentred, `hi = lo = 0` gives `|v|`.
    /// # Safety
    /// As [`F32x16::splat`], `x` valid for reading `x[48]`, `out` for writing 4 values.
    #[inline(always)]
    unsafe fn keep_lane_of_block<S: Storage>(x: *const S, hi: f32, lo: f32, t0: f32, out: *mut f32) -> usize {
        let mut kept = 0;
        for q in 0..4 {
            let z = (((*x.add(W * q)).widen_one() - hi) - lo).abs();
            *out.add(kept) = z;
            kept += (z >= t0) as usize;
        }
        kept
    }
    /// Top-k's mean of the k largest `|z|` of a row of `blocks` whole blocks with no branch on
    /// the data where the layout can (`top_k_avx512::mean_of_marked`, whose contract this is,
    /// and `top_k_avx2::mean_of_marked`); `None` where it cannot, or when the marked lanes or
    /// candidates are too many: the caller then marks and gathers in memory
    /// (`fused::top_k_of_marked`), with the same result.
    /// # Safety
    /// As `top_k_avx512::mean_of_marked`.
    #[inline(always)]
    unsafe fn top_k_mean_in_registers<S: Storage>(row: MarkedRow<S>) -> Option<f32> {
        let _ = row;
        None
    }
    /// Whether this is the AVX-512 layout (else an AVX2 one): which instruction set a function
    /// of its own for this layout is compiled for (`fused::isolated_top_k_pass`).
    const AVX512: bool = false;
    /// `rank_select::top_k_of_few`: move the k largest of the m magnitudes `a[..m]`
    /// (1 <= k <= m <= `rank_select::FEW`) to `a[..k]`, descending.
    /// # Safety
    /// As [`F32x16::splat`].
    #[inline(always)]
    unsafe fn top_k_of_few(a: &mut [f32], m: usize, k: usize) {
        crate::row::rank_select::top_k_of_few(a, m, k)
    }
}

/// A Top-k row of whole blocks and what its marking found, for
/// [`F32x16::top_k_mean_in_registers`]: one definition of the arguments that the fused
/// forward (`fused::in_registers`) hands through the layout to `top_k_avx512::mean_of_marked`,
/// whose contract says what each must be.
pub(crate) struct MarkedRow<S> {
    /// The row: `64 blocks` values.
    pub x: *const S,
    pub blocks: usize,
    /// Each block's 16 lane maxima, in memory order.
    pub bmax: *const f32,
    /// The bound a lane maximum must reach for the lane to be marked.
    pub c: f32,
    /// `(hi, lo)` of `z = fl(fl(x - hi) - lo)`.
    pub hi_lo: (f32, f32),
    /// The candidates' threshold on `|z|`.
    pub t0: f32,
    pub k: usize,
    /// Room for `16 blocks + 16` positions.
    pub pos: *mut u32,
    /// The row's centred values `x - hi` (`z = fl(t - lo)`) where its statistics pass saved
    /// them (whole groups in register order: `fused::top_k_lane_maxima`), else null.
    pub t: *const f32,
}

/// Top-k's mean from the sum of its k values (`stats::mean_of_sorted_top_k`'s `sum / k`), for
/// the fused selections (`fused::top_k_of_marked`, `top_k_avx2`, `top_k_avx512`): where k is a
/// power of two, as a product by its exact reciprocal, which rounds the same quotient once, in
/// a third of a division's latency at the end of the row's longest chain.
#[inline(always)]
pub(crate) fn mean_of_k(sum: f32, k: usize) -> f32 {
    if k.is_power_of_two() {
        sum * (1.0 / k as f32)
    } else {
        sum / k as f32
    }
}

/// A storage type the fused kernels read and write directly: f32, f16, bf16.
pub(crate) trait Storage: Element {
    /// Bit pattern (as f32) of the largest finite value of the type: an f32 result whose `|v|`
    /// bits exceed it may be non-finite once stored ([`F32x16::max_abs_bits`]).
    const MAX_FINITE_BITS: u32;
    /// # Safety
    /// As [`F32x16::load_f32`].
    unsafe fn load<V: F32x16>(p: *const Self) -> V;
    /// One rounding into the type, bit-identical to `Element::store_f32`.
    /// # Safety
    /// As [`F32x16::store_f32`].
    unsafe fn store<V: F32x16>(v: V, p: *mut Self);
    /// Whether the fused Top-k forward saves a row's centred values for its store pass on AVX2
    /// (`row::SAVED_CENTRED`): where widening the storage costs vector operations that the
    /// store pass then spares. bf16 only, by `examples/prefetch_ahead.rs` on the AVX2 host
    /// (switch `saved`, Top-k 4096x1024, 150 runs a side, time off over time on): bf16
    /// 1.03-1.07 in six runs; with f16 and f32 saving too, f16 0.95-0.96 and f32 0.72 (why
    /// f32 lost that much was not found; its row is read by loads folded into the
    /// subtractions, so it had little to gain). One thread, rows in cache
    /// (`examples/forward_wall.rs`): bf16 0.428 -> 0.405-0.416 us per row of 1024. Since the
    /// gather also reads the saved values and the store pass sums the next row (`fused::row`),
    /// the same switch measured bf16 1.059-1.069 (three runs, 300 a side, two threads).
    const SAVES_CENTRED: bool = false;
    /// Whether [`Storage::store_non_nan`] differs from [`Storage::store`] (on NaN lanes).
    const NON_NAN_STORE_IS_PARTIAL: bool = false;
    /// [`Storage::store`] for lanes that are not NaN (a NaN lane may be stored wrong, see
    /// [`Storage::NON_NAN_STORE_IS_PARTIAL`]).
    /// # Safety
    /// As [`F32x16::store_f32`].
    #[inline(always)]
    unsafe fn store_non_nan<V: F32x16>(v: V, p: *mut Self) {
        Self::store(v, p)
    }
    /// One value as f32, as [`Storage::load`] widens it: the same value, and for a NaN a NaN
    /// (whose payload may differ from `Element::to_f32`'s, which quiets it: a NaN only ever
    /// fails comparisons where this is used).
    #[inline(always)]
    fn widen_one(self) -> f32 {
        self.to_f32()
    }
    /// `p[0]`, `p[16]`, `p[32]` and `p[48]` widened exactly (as [`Storage::load`] widens), in
    /// one SSE register: a lane of a block of Top-k's gather (`avx2::keep_lane_of_block`).
    /// # Safety
    /// As [`F32x16::load_f32`] (the CPU has AVX2 and F16C), `p` valid for reading `p[48]`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load_lane_of_block(p: *const Self) -> std::arch::x86_64::__m128;
    /// [`Storage::store`] as a non-temporal store ([`F32x16::store_f32_nt`]).
    /// # Safety
    /// As [`F32x16::store_f32_nt`].
    unsafe fn store_nt<V: F32x16>(v: V, p: *mut Self);
    /// [`Storage::store_non_nan`] as a non-temporal store.
    /// # Safety
    /// As [`F32x16::store_f32_nt`].
    #[inline(always)]
    unsafe fn store_non_nan_nt<V: F32x16>(v: V, p: *mut Self) {
        Self::store_nt(v, p)
    }
}

/// The numbers of the set bits of `word` plus `base`, in increasing order, written from `at`:
/// the marks of Top-k's selections (`fused::gather_marked`, `top_k_avx2`). Marks are few and
/// scattered, so a loop over them would mispredict its exit about once per word; four are
/// written unconditionally (`tzcnt` of 0 is 64: a value past the count, harmless, with `base`
/// at most `u16::MAX - 64`), and the loop runs only for a fifth and more. `at` must have room
/// for four values, or the word's popcount if more.
#[inline(always)]
pub(crate) unsafe fn write_set_bits(word: u64, base: u16, at: *mut u16) {
    let mut bits = word;
    for q in 0..4 {
        *at.add(q) = base + bits.trailing_zeros() as u16;
        bits &= bits.wrapping_sub(1);
    }
    let mut q = 4;
    while bits != 0 {
        *at.add(q) = base + bits.trailing_zeros() as u16;
        bits &= bits - 1;
        q += 1;
    }
}

/// Marks in words of 64 bits, as the fused Top-k makes them (`fused::mark_blocks`: a bit per
/// lane of a block of 64 values), and bit i of `nonzero[m]` set when word 64 m + i has a
/// mark. Most words have none; the bitmap, built in a register as the words go by (no
/// branch, no store whose address depends on the data), lets the gather visit only those
/// that do.
pub(crate) struct MarkList {
    /// The words (room for every word of the row).
    pub words: *mut u64,
    /// The bitmap of nonzero words (room for one bit per word of the row).
    pub nonzero: *mut u64,
    /// The bitmap's word being built.
    pending: u64,
    /// Words pushed.
    pub count: usize,
}

impl MarkList {
    /// An empty list writing to `words` and `nonzero`.
    pub fn new(words: *mut u64, nonzero: *mut u64) -> Self {
        MarkList { words, nonzero, pending: 0, count: 0 }
    }
    /// The next word (the row's words pushed in order, then [`MarkList::finish`]).
    /// # Safety
    /// `words` valid for writing `count + 1` words, `nonzero` for `(count + 1).div_ceil(64)`.
    #[inline(always)]
    pub unsafe fn push(&mut self, word: u64) {
        let w = self.count;
        self.words.add(w).write_unaligned(word);
        self.pending |= ((word != 0) as u64) << (w % 64);
        self.count = w + 1;
        if self.count.is_multiple_of(64) {
            self.nonzero.add(w / 64).write_unaligned(self.pending);
            self.pending = 0;
        }
    }
    /// Stores the bitmap's last, partial word.
    /// # Safety
    /// As [`MarkList::push`].
    #[inline(always)]
    pub unsafe fn finish(&mut self) {
        if !self.count.is_multiple_of(64) {
            self.nonzero.add(self.count / 64).write_unaligned(self.pending);
            self.pending = 0;
        }
    }
}

/// Order this thread's non-temporal stores before its later stores (the end of a parallel
/// task, which another thread then reads), as the streaming stores require.
#[inline(always)]
pub(crate) fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence is part of SSE, which every x86_64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

impl Storage for f32 {
    const MAX_FINITE_BITS: u32 = 0x7F7F_FFFF;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_lane_of_block(p: *const Self) -> std::arch::x86_64::__m128 {
        std::arch::x86_64::_mm_setr_ps(*p, *p.add(W), *p.add(2 * W), *p.add(3 * W))
    }
    #[inline(always)]
    unsafe fn load<V: F32x16>(p: *const Self) -> V {
        V::load_f32(p)
    }
    #[inline(always)]
    unsafe fn store<V: F32x16>(v: V, p: *mut Self) {
        v.store_f32(p)
    }
    #[inline(always)]
    unsafe fn store_nt<V: F32x16>(v: V, p: *mut Self) {
        v.store_f32_nt(p)
    }
}

impl Storage for f16 {
    // 65504.0
    const MAX_FINITE_BITS: u32 = 0x477F_E000;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_lane_of_block(p: *const Self) -> std::arch::x86_64::__m128 {
        use std::arch::x86_64::*;
        let b = |q: usize| (*p.add(W * q)).to_bits() as i16;
        _mm_cvtph_ps(_mm_setr_epi16(b(0), b(1), b(2), b(3), 0, 0, 0, 0))
    }
    #[inline(always)]
    unsafe fn load<V: F32x16>(p: *const Self) -> V {
        V::load_f16(p as *const u16)
    }
    #[inline(always)]
    unsafe fn store<V: F32x16>(v: V, p: *mut Self) {
        v.store_f16(p as *mut u16)
    }
    #[inline(always)]
    unsafe fn store_nt<V: F32x16>(v: V, p: *mut Self) {
        v.store_f16_nt(p as *mut u16)
    }
}

impl Storage for bf16 {
    // bf16::MAX = 3.3895314e38
    const MAX_FINITE_BITS: u32 = 0x7F7F_0000;
    /// Each value's bits as the high half of an f32.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load_lane_of_block(p: *const Self) -> std::arch::x86_64::__m128 {
        use std::arch::x86_64::*;
        let b = |q: usize| (*p.add(W * q)).to_bits() as i16;
        _mm_castsi128_ps(_mm_setr_epi16(0, b(0), 0, b(1), 0, b(2), 0, b(3)))
    }
    /// The high half of an f32: a shift (`to_f32` also quiets a NaN).
    #[inline(always)]
    fn widen_one(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[inline(always)]
    unsafe fn load<V: F32x16>(p: *const Self) -> V {
        V::load_bf16(p as *const u16)
    }
    #[inline(always)]
    unsafe fn store<V: F32x16>(v: V, p: *mut Self) {
        v.store_bf16(p as *mut u16)
    }
    const NON_NAN_STORE_IS_PARTIAL: bool = true;
    const SAVES_CENTRED: bool = true;
    #[inline(always)]
    unsafe fn store_non_nan<V: F32x16>(v: V, p: *mut Self) {
        v.store_bf16_non_nan(p as *mut u16)
    }
    #[inline(always)]
    unsafe fn store_nt<V: F32x16>(v: V, p: *mut Self) {
        v.store_bf16_nt(p as *mut u16)
    }
    #[inline(always)]
    unsafe fn store_non_nan_nt<V: F32x16>(v: V, p: *mut Self) {
        v.store_bf16_non_nan_nt(p as *mut u16)
    }
}

/// Load the `x.len() < 16` values of a row's tail, zero-padded to 16 lanes.
/// # Safety
/// As [`F32x16::splat`].
#[inline(always)]
pub(crate) unsafe fn load_partial<V: F32x16, S: Storage>(x: &[S]) -> V {
    let mut buf = [S::default(); W];
    buf[..x.len()].copy_from_slice(x);
    S::load(buf.as_ptr())
}

/// Store the first `y.len() < 16` lanes of `v` into a row's tail.
/// # Safety
/// As [`F32x16::splat`].
#[inline(always)]
pub(crate) unsafe fn store_partial<V: F32x16, S: Storage>(v: V, y: &mut [S]) {
    let mut buf = [S::default(); W];
    S::store(v, buf.as_mut_ptr());
    let m = y.len();
    y.copy_from_slice(&buf[..m]);
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests;

/// The unit tests of this module and of its kernels' modules ([`crate::unit_tests`]).
#[cfg(feature = "test-hooks")]
pub(super) fn unit_tests() -> Vec<crate::unit_tests::UnitTest> {
    let mut all = tests::TESTS.to_vec();
    #[cfg(target_arch = "x86_64")]
    all.extend([sort16::tests::TESTS, sort16_avx512::tests::TESTS, top_k_avx2::tests::TESTS].concat());
    all
}
