//! The learning-rate schedule: optional linear warmup, then cosine decay to `min_lr`.
//!
//! For the step with 0-based index `s` of a run of `S` steps with `W` warmup steps:
//!
//! ```text
//! s <  W:  lr(s) = lr * (s + 1) / W
//! s >= W:  p = (s - W) / (S - W),   lr(s) = min_lr + 0.5 (1 + cos(pi p)) (lr - min_lr)
//! ```
//!
//! The cosine part is the nGPT code's `get_lr` with `lr_decay_iters = S` (algorithms.md 1.5):
//! it starts at the peak and reaches `min_lr` at the step after the last one. nGPT and anGPT
//! use no warmup (W = 0); GPT baselines usually do.

/// The schedule of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    pub total_steps: u64,
}

impl Schedule {
    /// Learning rate of the step with 0-based index `step`.
    pub fn lr_at(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay = self.total_steps.saturating_sub(self.warmup_steps);
        if decay == 0 {
            return self.lr;
        }
        let p = ((step - self.warmup_steps) as f64 / decay as f64).min(1.0);
        self.min_lr + 0.5 * (1.0 + (std::f64::consts::PI * p).cos()) * (self.lr - self.min_lr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_without_warmup() {
        let s = Schedule { lr: 1e-3, min_lr: 1e-4, warmup_steps: 0, total_steps: 100 };
        assert_eq!(s.lr_at(0), 1e-3);
        // Half way: exactly the mean of peak and floor.
        assert!((s.lr_at(50) - 5.5e-4).abs() < 1e-18);
        // A quarter: min + 0.5 (1 + cos(pi/4)) (lr - min).
        let q = 1e-4 + 0.5 * (1.0 + std::f64::consts::FRAC_1_SQRT_2) * 9e-4;
        assert!((s.lr_at(25) - q).abs() < 1e-18, "{}", s.lr_at(25));
        assert!(s.lr_at(99) > 1e-4 && s.lr_at(99) < 1.01e-4);
        assert_eq!(s.lr_at(100), 1e-4);
        assert_eq!(s.lr_at(1000), 1e-4);
    }

    #[test]
    fn linear_warmup_then_cosine() {
        let s = Schedule { lr: 2e-3, min_lr: 0.0, warmup_steps: 4, total_steps: 14 };
        assert_eq!(s.lr_at(0), 5e-4);
        assert_eq!(s.lr_at(1), 1e-3);
        assert_eq!(s.lr_at(3), 2e-3);
        assert_eq!(s.lr_at(4), 2e-3);
        assert!((s.lr_at(9) - 1e-3).abs() < 1e-18);
        // Monotone non-increasing after warmup.
        for i in 4..20 {
            assert!(s.lr_at(i + 1) <= s.lr_at(i));
        }
    }
}
