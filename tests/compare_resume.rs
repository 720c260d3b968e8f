//! Resuming a half-finished comparison completes it without re-running finished cells, and an
//! interrupted cell is resumed (from its checkpoint), through a fake cell runner.

use crate::compare_common;

use std::path::Path;
use std::sync::Mutex;

use compare_common::*;
use normlab::compare::preset::Cell;
use normlab::compare::{run_cells, write_report, CellRunner, CompareError, Preset};
use normlab::train::RunSummary;

/// Writes synthetic runs; fails ("interrupted") on the cell named `fail_on`, after leaving a
/// checkpoint behind as a real interrupted run would.
struct FakeRunner {
    fail_on: Option<String>,
    /// (cell, resume flag, checkpoint present when called)
    calls: Mutex<Vec<(String, bool, bool)>>,
}

impl FakeRunner {
    fn new(fail_on: Option<&str>) -> Self {
        FakeRunner { fail_on: fail_on.map(str::to_string), calls: Mutex::new(Vec::new()) }
    }
    fn called(&self) -> Vec<String> {
        self.calls.lock().unwrap().iter().map(|c| c.0.clone()).collect()
    }
}

impl CellRunner for FakeRunner {
    fn run_cell(&self, cell: &Cell, out: &Path, resume: bool) -> Result<RunSummary, Box<dyn std::error::Error + Send + Sync>> {
        let ckpt = out.join("checkpoint");
        self.calls.lock().unwrap().push((cell.name.clone(), resume, ckpt.exists()));
        if self.fail_on.as_deref() == Some(cell.name.as_str()) {
            std::fs::create_dir_all(&ckpt)?;
            return Err("interrupted".into());
        }
        let dir = out.parent().and_then(Path::parent).expect("DIR/runs/CELL");
        write_run(dir, cell, &default_synth(cell));
        Ok(serde_json::from_str(&std::fs::read_to_string(out.join("summary.json"))?)?)
    }
}

#[test]
fn an_interrupted_comparison_resumes_without_repeating_finished_cells() {
    let dir = temp_dir("resume");
    let preset = Preset::parse(&preset_text("1"), "synthetic").unwrap();
    let names: Vec<String> = preset.cells.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names.len(), 12);

    // First attempt: interrupted in the fifth cell.
    let first = FakeRunner::new(Some(&names[4]));
    let e = run_cells(&preset, &dir, &first, false).unwrap_err();
    assert!(matches!(&e, CompareError::Cell { cell, .. } if cell == &names[4]), "{e}");
    assert_eq!(first.called(), names[..5].to_vec());

    // Second attempt: the four finished cells are not run again, the fifth resumes from its
    // checkpoint, the rest run.
    let second = FakeRunner::new(None);
    let outcome = run_cells(&preset, &dir, &second, false).unwrap();
    assert_eq!(outcome.skipped, names[..4].to_vec());
    assert_eq!(outcome.ran, names[4..].to_vec());
    assert_eq!(second.called(), names[4..].to_vec());
    let calls = second.calls.lock().unwrap().clone();
    assert!(calls[0].1 && calls[0].2, "the interrupted cell must be resumed with its checkpoint present: {calls:?}");

    // The finished comparison reports every cell.
    let s = write_report(&preset, &dir, "test").unwrap();
    assert!(s.missing_cells.is_empty());
    assert_eq!(s.runs.len(), 12);

    // A third attempt runs nothing.
    let third = FakeRunner::new(None);
    let outcome = run_cells(&preset, &dir, &third, false).unwrap();
    assert!(outcome.ran.is_empty() && third.called().is_empty());
    assert_eq!(outcome.skipped.len(), 12);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_runner_that_writes_no_summary_is_an_error() {
    struct Silent;
    impl CellRunner for Silent {
        fn run_cell(&self, cell: &Cell, _out: &Path, _resume: bool) -> Result<RunSummary, Box<dyn std::error::Error + Send + Sync>> {
            Err(format!("no training for {}", cell.name).into())
        }
    }
    let dir = temp_dir("silent");
    let preset = Preset::parse(&preset_text("1"), "synthetic").unwrap();
    let e = run_cells(&preset, &dir, &Silent, false).unwrap_err().to_string();
    assert!(e.contains("run gpt_plus-l2-f32-s1 failed: no training for gpt_plus-l2-f32-s1"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every unfinished cell is checked (`CellRunner::check_cell`, the device check of the real
/// runner) before the first one trains: a cell the runner refuses stops the comparison at once,
/// named, with nothing run.
#[test]
fn a_cell_the_runner_cannot_run_stops_the_comparison_before_any_training() {
    struct Picky {
        inner: FakeRunner,
        refuse: String,
    }
    impl CellRunner for Picky {
        fn run_cell(&self, cell: &Cell, out: &Path, resume: bool) -> Result<RunSummary, Box<dyn std::error::Error + Send + Sync>> {
            self.inner.run_cell(cell, out, resume)
        }
        fn check_cell(&self, cell: &Cell) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            if cell.name == self.refuse {
                return Err(format!("{} is not supported here", cell.name).into());
            }
            Ok(())
        }
    }
    let dir = temp_dir("picky");
    let preset = Preset::parse(&preset_text("1"), "synthetic").unwrap();
    let last = preset.cells.last().unwrap().name.clone();
    let picky = Picky { inner: FakeRunner::new(None), refuse: last.clone() };
    let e = run_cells(&preset, &dir, &picky, false).unwrap_err();
    assert!(matches!(&e, CompareError::Cell { cell, .. } if cell == &last), "{e}");
    assert!(e.to_string().contains("is not supported here"), "{e}");
    assert!(picky.inner.called().is_empty(), "{:?}", picky.inner.called());
    // The real runner accepts every cell on the CPU.
    let cpu = normlab::compare::TrainRunner { device: candle_core::Device::Cpu };
    for cell in &preset.cells {
        cpu.check_cell(cell).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
