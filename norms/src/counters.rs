//! Numerical-stability counters every call can return.

/// What went wrong numerically in one call (summed over rows or channels).
///
/// - `nonfinite_in`: input elements that were NaN or +-Inf. A row (channel) with any of them
///   is output as all-NaN: a non-finite input is propagated, never hidden.
/// - `acc_overflow`: rows (channels) whose statistic became non-finite although every input
///   was finite: the accumulator overflowed. Only the pure half accumulators can do this; the
///   wide ones rescale the row instead (see `Accum`).
/// - `nonfinite_out`: output elements that are NaN or +-Inf after rounding to the storage type
///   (including finite results that overflowed the storage type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub nonfinite_in: u64,
    pub acc_overflow: u64,
    pub nonfinite_out: u64,
}

impl Counters {
    pub fn is_clean(&self) -> bool {
        *self == Counters::default()
    }
}

impl std::ops::AddAssign for Counters {
    fn add_assign(&mut self, o: Self) {
        self.nonfinite_in += o.nonfinite_in;
        self.acc_overflow += o.acc_overflow;
        self.nonfinite_out += o.nonfinite_out;
    }
}

impl std::ops::Add for Counters {
    type Output = Self;
    fn add(mut self, o: Self) -> Self {
        self += o;
        self
    }
}

impl std::iter::Sum for Counters {
    fn sum<I: Iterator<Item = Self>>(it: I) -> Self {
        it.fold(Counters::default(), |a, b| a + b)
    }
}
