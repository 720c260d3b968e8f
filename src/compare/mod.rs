//! `normlab compare`: train the variants side by side and report stability and speed (issue 6).
//!
//! - [`preset`]: the preset TOML, the matrix `{arch} x {variant} x {precision} x {seed}`
//!   expanded into cells, and its hash.
//! - [`manifest`]: the output directory and its manifest (foreign or corrupt: an error).
//! - [`runner`]: runs the unfinished cells (resumable; the trainer behind a trait).
//! - [`load`]: reads a run's `summary.json` and `metrics.jsonl`.
//! - [`analysis`]: group statistics (mean ± std over seeds, steps to GPT+'s loss, overheads).
//! - [`claims`]: the papers' claims beside the measurements, verdicts by stated rules.
//! - [`plot`], [`doc`], [`report`], [`summary`]: the plots, the Markdown/HTML report and
//!   `summary.json`.
//! - [`fsio`]: atomic writes.
//!
//! Layout of `DIR`: `manifest.json`, `runs/CELL/` (one training run each), `plots/`,
//! `report.md`, `report.html`, `summary.json`.

pub mod analysis;
pub mod claims;
pub mod doc;
pub mod error;
pub mod fsio;
pub mod load;
pub mod manifest;
pub mod plot;
pub mod preset;
pub mod report;
pub mod runner;
pub mod summary;

pub use error::CompareError;
pub use preset::{Cell, Preset};
pub use report::write_report;
pub use runner::{run_cells, CellRunner, RunOutcome, TrainRunner};
pub use summary::ComparisonSummary;
