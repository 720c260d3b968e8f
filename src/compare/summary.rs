//! `DIR/summary.json`: the machine-readable comparison (schema in docs/summary-schema.md).

use serde::Serialize;

use super::analysis::GroupStats;
use super::claims::{Claim, NuAcf};
use crate::bench::machine::{MachineInfo, Versions};
use crate::train::RunSummary;

/// Schema tag of `summary.json`; bump it with every incompatible change of these types.
pub const SUMMARY_SCHEMA: &str = "normlab.compare-summary/1";

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComparisonSummary {
    pub schema: String,
    pub preset: PresetInfo,
    pub provenance: ReportProvenance,
    /// The precision the claims are judged in.
    pub reference_precision: Option<String>,
    /// Cells of the preset without a finished run (the report covers the others).
    pub missing_cells: Vec<String>,
    pub groups: Vec<GroupStats>,
    pub runs: Vec<RunRow>,
    pub claims: Vec<Claim>,
    pub nu_acf: NuAcf,
    /// Plot files, relative to DIR.
    pub plots: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PresetInfo {
    pub name: String,
    pub description: String,
    pub hash: String,
    pub cells: usize,
    /// The preset TOML as given.
    pub source: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReportProvenance {
    /// The command line that produced the report.
    pub command: String,
    /// The git commit the binary was built from (`bench::machine::Provenance`), or "unknown".
    pub git_commit: String,
    /// Whether tracked files differed from it when the binary was built.
    pub git_dirty: Option<bool>,
    pub machine: MachineInfo,
    pub versions: Versions,
    /// Seconds since the Unix epoch when the report was written.
    pub unix_time: u64,
}

/// One run with its coordinates in the matrix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunRow {
    pub cell: String,
    pub arch: String,
    pub variant: String,
    pub precision: String,
    pub seed: u64,
    pub summary: RunSummary,
}
