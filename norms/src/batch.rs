//! Batch (per-channel) forms: placeholder module replaced in the next step.
