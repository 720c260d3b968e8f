//! Dynamic loss scaling for f16 mixed precision.
//!
//! The loss is multiplied by `scale` before the backward pass so small f16 gradients do not
//! flush to zero; the f32 gradients are divided by it again. A non-finite gradient means the
//! scaled backward overflowed f16: the step is skipped (no update, no projection) and the
//! scale halves. After `growth_interval` consecutive clean steps it doubles. Scales stay powers
//! of two when the initial one is, so scaling and unscaling are exact. The scale never drops
//! below 1: at scale 1 a non-finite gradient is a real one, not a scaling artefact, and the
//! step is still skipped and recorded.

use serde::{Deserialize, Serialize};

/// The floor of the loss scale.
pub const MIN_SCALE: f64 = 1.0;

/// What happened to the scale at one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleEvent {
    /// Clean step, scale unchanged.
    None,
    /// Clean step that completed an interval: the scale doubled after it.
    Grew,
    /// Non-finite gradient: step skipped, scale halved (or kept at the floor).
    Overflow,
}

/// The scaler's state (saved in checkpoints).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScaler {
    pub scale: f64,
    /// Clean steps since the last change.
    pub clean_steps: u64,
    pub growth_interval: u64,
}

impl LossScaler {
    pub fn new(init: f64, growth_interval: u64) -> Self {
        LossScaler { scale: init.max(MIN_SCALE), clean_steps: 0, growth_interval: growth_interval.max(1) }
    }

    /// Update after a step whose unscaled gradient was finite (`finite`) or not.
    pub fn update(&mut self, finite: bool) -> ScaleEvent {
        if !finite {
            self.scale = (self.scale * 0.5).max(MIN_SCALE);
            self.clean_steps = 0;
            return ScaleEvent::Overflow;
        }
        self.clean_steps += 1;
        if self.clean_steps >= self.growth_interval {
            self.scale *= 2.0;
            self.clean_steps = 0;
            return ScaleEvent::Grew;
        }
        ScaleEvent::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_overflow_and_doubles_after_interval() {
        let mut s = LossScaler::new(1024.0, 3);
        assert_eq!(s.update(false), ScaleEvent::Overflow);
        assert_eq!(s.scale, 512.0);
        assert_eq!(s.update(true), ScaleEvent::None);
        assert_eq!(s.update(true), ScaleEvent::None);
        // An overflow resets the count of clean steps.
        assert_eq!(s.update(false), ScaleEvent::Overflow);
        assert_eq!(s.scale, 256.0);
        assert_eq!(s.update(true), ScaleEvent::None);
        assert_eq!(s.update(true), ScaleEvent::None);
        assert_eq!(s.update(true), ScaleEvent::Grew);
        assert_eq!(s.scale, 512.0);
        assert_eq!(s.clean_steps, 0);
        let mut floor = LossScaler::new(1.0, 10);
        assert_eq!(floor.update(false), ScaleEvent::Overflow);
        assert_eq!(floor.scale, 1.0);
    }
}
