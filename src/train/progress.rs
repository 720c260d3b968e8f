//! The progress bar of a run (stderr): steps, loss and tokens/s. Hidden unless asked for.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `total` steps starting at `done`.
pub fn bar(show: bool, total: u64, done: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg} (eta {eta})") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_position(done);
    pb
}

/// The bar's message after a step.
pub fn message(loss: f64, tokens_per_s: f64, val_loss: Option<f64>) -> String {
    match val_loss {
        Some(v) => format!("loss {loss:.4} val {v:.4} | {tokens_per_s:.0} tok/s"),
        None => format!("loss {loss:.4} | {tokens_per_s:.0} tok/s"),
    }
}
