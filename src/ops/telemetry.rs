//! Numerical-stability counters of the ops, readable by a training loop.
//!
//! Every forward and backward call of an op adds its [`Counters`] (non-finite inputs,
//! accumulator overflows, non-finite outputs) into a [`Telemetry`] shared through an `Arc`.
//! A module owns one by default; several modules (a whole model) can share one with
//! `with_telemetry`. The loop reads it with [`Telemetry::snapshot`] or drains it per step with
//! [`Telemetry::take`]. Atomics keep it `Send + Sync` (candle stores ops in `Arc`s and may run
//! the backward on another thread) and cost nothing measurable next to a norm.

use normlab_norms::Counters;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ops::fp8::Fp8Counters;

#[derive(Debug, Default)]
struct AtomicCounters {
    nonfinite_in: AtomicU64,
    acc_overflow: AtomicU64,
    nonfinite_out: AtomicU64,
    calls: AtomicU64,
}

impl AtomicCounters {
    fn add(&self, c: Counters) {
        self.nonfinite_in.fetch_add(c.nonfinite_in, Ordering::Relaxed);
        self.acc_overflow.fetch_add(c.acc_overflow, Ordering::Relaxed);
        self.nonfinite_out.fetch_add(c.nonfinite_out, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
    fn read(&self, take: bool) -> (Counters, u64) {
        let get = |a: &AtomicU64| if take { a.swap(0, Ordering::Relaxed) } else { a.load(Ordering::Relaxed) };
        let c = Counters {
            nonfinite_in: get(&self.nonfinite_in),
            acc_overflow: get(&self.acc_overflow),
            nonfinite_out: get(&self.nonfinite_out),
        };
        (c, get(&self.calls))
    }
}

#[derive(Debug, Default)]
struct AtomicFp8 {
    values: AtomicU64,
    underflow: AtomicU64,
    subnormal: AtomicU64,
    nonfinite: AtomicU64,
}

impl AtomicFp8 {
    fn add(&self, c: Fp8Counters) {
        self.values.fetch_add(c.values, Ordering::Relaxed);
        self.underflow.fetch_add(c.underflow, Ordering::Relaxed);
        self.subnormal.fetch_add(c.subnormal, Ordering::Relaxed);
        self.nonfinite.fetch_add(c.nonfinite, Ordering::Relaxed);
    }
    fn read(&self, take: bool) -> Fp8Counters {
        let get = |a: &AtomicU64| if take { a.swap(0, Ordering::Relaxed) } else { a.load(Ordering::Relaxed) };
        Fp8Counters { values: get(&self.values), underflow: get(&self.underflow), subnormal: get(&self.subnormal), nonfinite: get(&self.nonfinite) }
    }
}

/// Sums of the counters of every op call that reported here.
#[derive(Debug, Default)]
pub struct Telemetry {
    forward: AtomicCounters,
    backward: AtomicCounters,
    fp8: AtomicFp8,
}

/// A copy of a [`Telemetry`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TelemetrySnapshot {
    pub forward: Counters,
    pub backward: Counters,
    pub forward_calls: u64,
    pub backward_calls: u64,
    /// fp8 E4M3 stores (`crate::ops::fp8_e4m3_store`; all zero unless fp8 storage is on).
    pub fp8: Fp8Counters,
}

impl TelemetrySnapshot {
    /// No non-finite value and no overflow in any call.
    pub fn is_clean(&self) -> bool {
        self.forward.is_clean() && self.backward.is_clean()
    }
}

impl Telemetry {
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self::default())
    }
    pub fn record_forward(&self, c: Counters) {
        self.forward.add(c);
    }
    pub fn record_backward(&self, c: Counters) {
        self.backward.add(c);
    }
    pub fn record_fp8(&self, c: Fp8Counters) {
        self.fp8.add(c);
    }
    /// The sums so far.
    pub fn snapshot(&self) -> TelemetrySnapshot {
        self.read(false)
    }
    /// The sums so far, resetting them to zero (each field is swapped atomically; a call that
    /// reports concurrently lands wholly or partly in the next period).
    pub fn take(&self) -> TelemetrySnapshot {
        self.read(true)
    }
    fn read(&self, take: bool) -> TelemetrySnapshot {
        let (forward, forward_calls) = self.forward.read(take);
        let (backward, backward_calls) = self.backward.read(take);
        TelemetrySnapshot { forward, backward, forward_calls, backward_calls, fp8: self.fp8.read(take) }
    }
}
