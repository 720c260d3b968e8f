//! Reading a finished run back: `RUN_DIR/summary.json` and `RUN_DIR/metrics.jsonl`
//! (the record types of `crate::train::record`).
//!
//! A resumed run may log a step or an evaluation twice (the steps after the last checkpoint
//! are run again); the last record of each step wins, and the series come back sorted by step.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::{io_err, CompareError, Result};
use crate::train::record::{DivergedRecord, SCHEMA};
use crate::train::{EvalRecord, Record, RunSummary, StepRecord};

/// Everything the report needs of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    pub summary: RunSummary,
    pub steps: Vec<StepRecord>,
    pub evals: Vec<EvalRecord>,
    pub diverged: Option<DivergedRecord>,
}

/// `RUN_DIR/summary.json`, if the run finished (else `None`); a summary that does not parse,
/// or has another schema tag, is an error naming the file.
pub fn read_summary(run_dir: &Path) -> Result<Option<RunSummary>> {
    let path = run_dir.join("summary.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let s: RunSummary = serde_json::from_str(&text).map_err(|e| CompareError::BadRunFile { path: path.clone(), why: e.to_string() })?;
    if s.schema != SCHEMA {
        return Err(CompareError::BadRunFile { path, why: format!("schema '{}' is not '{SCHEMA}'", s.schema) });
    }
    Ok(Some(s))
}

/// Parse a `metrics.jsonl` text; `path` names it in errors. Blank lines are skipped.
pub fn parse_metrics(text: &str, path: &Path) -> Result<(Vec<StepRecord>, Vec<EvalRecord>, Option<DivergedRecord>)> {
    let mut steps = BTreeMap::new();
    let mut evals = BTreeMap::new();
    let mut diverged: Option<DivergedRecord> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: Record = serde_json::from_str(line).map_err(|e| CompareError::BadMetricsLine { path: path.to_path_buf(), line: i + 1, why: e.to_string() })?;
        match rec {
            Record::Step(s) => {
                steps.insert(s.step, s);
            }
            Record::Eval(e) => {
                evals.insert(e.step, e);
            }
            Record::Diverged(d) => {
                if diverged.as_ref().is_none_or(|old| d.step < old.step) {
                    diverged = Some(d);
                }
            }
        }
    }
    Ok((steps.into_values().collect(), evals.into_values().collect(), diverged))
}

/// Load a finished run (its summary must exist).
pub fn load_run(cell: &str, run_dir: &Path) -> Result<RunData> {
    let summary = read_summary(run_dir)?.ok_or_else(|| CompareError::MissingRun { cell: cell.to_string(), path: run_dir.join("summary.json") })?;
    let path = run_dir.join("metrics.jsonl");
    let (steps, evals, diverged) = if path.exists() {
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        parse_metrics(&text, &path)?
    } else {
        (Vec::new(), Vec::new(), None)
    };
    Ok(RunData { summary, steps, evals, diverged })
}
