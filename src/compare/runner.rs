//! Running the cells of a comparison, resumably.
//!
//! A cell whose `summary.json` exists is finished and never run again; any other cell is run
//! with `resume = true`, so an interrupted run continues from its checkpoint. The training
//! itself is behind [`CellRunner`] (the real one is [`TrainRunner`]; tests use a fake), so the
//! resume logic can be checked without training.
//!
//! Progress (indicatif, on stderr): one bar over the steps of all cells still to run, with the
//! run in hand, its last logged loss (read from its `metrics.jsonl` by a watcher thread, so the
//! training loop needs no hook), cells done/total and the time left.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use candle_core::Device;
use indicatif::{ProgressBar, ProgressStyle};

use super::error::{CompareError, Result};
use super::load::read_summary;
use super::manifest::{prepare_dir, run_dir};
use super::preset::{Cell, Preset};
use crate::train::{Record, RunOptions, RunSummary};

/// Trains one cell into `out` (writing `metrics.jsonl`, checkpoints and finally `summary.json`).
pub trait CellRunner {
    fn run_cell(&self, cell: &Cell, out: &Path, resume: bool) -> std::result::Result<RunSummary, Box<dyn std::error::Error + Send + Sync>>;

    /// Whether the cell can run here at all (checked for every unfinished cell before the first
    /// one starts, so an unsupported cell does not stop a comparison hours in). Default: yes.
    fn check_cell(&self, _cell: &Cell) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }
}

/// The real runner: `crate::train::run`.
pub struct TrainRunner {
    pub device: Device,
}

impl CellRunner for TrainRunner {
    fn run_cell(&self, cell: &Cell, out: &Path, resume: bool) -> std::result::Result<RunSummary, Box<dyn std::error::Error + Send + Sync>> {
        let opts = RunOptions { device: self.device.clone(), resume, progress: false };
        Ok(crate::train::run(&cell.config, &cell.name, out, &opts)?)
    }

    /// `crate::train::check_device`: off the CPU the pure precision modes and fp8 storage are
    /// refused (typed `TrainError`), before any cell trains.
    fn check_cell(&self, cell: &Cell) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(crate::train::check_device(&cell.config.model, &cell.config.train, &self.device)?)
    }
}

/// What happened to each cell.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct RunOutcome {
    /// Cells found finished (not run again).
    pub skipped: Vec<String>,
    /// Cells run (or resumed) now.
    pub ran: Vec<String>,
}

/// Prepare `dir` for `preset` (see [`prepare_dir`]) and run every unfinished cell.
pub fn run_cells(preset: &Preset, dir: &Path, runner: &dyn CellRunner, progress: bool) -> Result<RunOutcome> {
    prepare_dir(dir, preset)?;
    let mut outcome = RunOutcome::default();
    let mut todo = Vec::new();
    for cell in &preset.cells {
        let out = run_dir(dir, &cell.name);
        if read_summary(&out)?.is_some() {
            outcome.skipped.push(cell.name.clone());
        } else {
            todo.push(cell);
        }
    }
    for cell in &todo {
        runner.check_cell(cell).map_err(|source| CompareError::Cell { cell: cell.name.clone(), source })?;
    }
    let total_steps: u64 = todo.iter().map(|c| c.config.train.steps).sum();
    let bar = if progress { ProgressBar::new(total_steps) } else { ProgressBar::hidden() };
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} steps, {elapsed} elapsed, ~{eta} left  {msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    let done_before = outcome.skipped.len();
    let n = preset.cells.len();
    let mut steps_before = 0u64;
    for (i, cell) in todo.iter().enumerate() {
        let out = run_dir(dir, &cell.name);
        std::fs::create_dir_all(&out).map_err(super::error::io_err(&out))?;
        bar.set_prefix(format!("cells {}/{n}", done_before + i));
        bar.set_message(cell.name.clone());
        bar.set_position(steps_before);
        let watcher = Watcher::start(bar.clone(), cell.name.clone(), out.join("metrics.jsonl"), steps_before);
        let result = runner.run_cell(cell, &out, true);
        watcher.stop();
        result.map_err(|source| CompareError::Cell { cell: cell.name.clone(), source })?;
        if read_summary(&out)?.is_none() {
            return Err(CompareError::Cell { cell: cell.name.clone(), source: "the run returned but wrote no summary.json".into() });
        }
        steps_before += cell.config.train.steps;
        outcome.ran.push(cell.name.clone());
    }
    bar.set_prefix(format!("cells {n}/{n}"));
    bar.finish_with_message("all runs finished");
    Ok(outcome)
}

/// Polls a run's `metrics.jsonl` and shows its last step and loss on the bar.
struct Watcher {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(bar: ProgressBar, cell: String, metrics: PathBuf, offset: u64) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = if bar.is_hidden() {
            None
        } else {
            Some(std::thread::spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if let Some((step, loss)) = last_step(&metrics) {
                        bar.set_position(offset + step);
                        bar.set_message(format!("{cell}: step {step}, loss {loss:.4}"));
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }))
        };
        Watcher { stop, handle }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The last step record of a metrics file (ignores a partly written last line).
fn last_step(metrics: &Path) -> Option<(u64, f64)> {
    let text = std::fs::read_to_string(metrics).ok()?;
    text.lines().rev().filter_map(|l| serde_json::from_str::<Record>(l).ok()).find_map(|r| match r {
        Record::Step(s) => Some((s.step, s.loss)),
        _ => None,
    })
}
