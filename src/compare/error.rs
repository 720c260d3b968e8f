//! Why a comparison could not be prepared, run or reported. Each error names the bad value
//! (the preset, the directory, the file and line) so the user can fix it.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CompareError {
    #[error("unknown preset '{0}': expected one of mini, quick, standard, full, or the path of a preset .toml file")]
    UnknownPreset(String),
    #[error("could not parse preset {source_name}: {message}")]
    PresetParse { source_name: String, message: String },
    #[error("invalid preset {preset}: {why}")]
    PresetInvalid { preset: String, why: String },
    #[error("{path} exists and is not a directory")]
    NotADirectory { path: PathBuf },
    #[error("{path} is a non-empty directory without a comparison manifest (manifest.json); refusing to write into it")]
    NotACompareDir { path: PathBuf },
    #[error("corrupt comparison manifest {path}: {why}; refusing to overwrite it")]
    CorruptManifest { path: PathBuf, why: String },
    #[error("{path} holds the comparison of preset '{found_name}' (hash {found_hash}), not of preset '{expected_name}' (hash {expected_hash}); use another --out directory")]
    ForeignPreset { path: PathBuf, found_name: String, found_hash: String, expected_name: String, expected_hash: String },
    #[error("run {cell} failed: {source}")]
    Cell { cell: String, #[source] source: Box<dyn std::error::Error + Send + Sync> },
    #[error("{path}: {why}")]
    BadRunFile { path: PathBuf, why: String },
    #[error("{path} line {line}: {why}")]
    BadMetricsLine { path: PathBuf, line: usize, why: String },
    #[error("run {cell} is missing: no {path}")]
    MissingRun { cell: String, path: PathBuf },
    #[error("could not draw plot {path}: {why}")]
    Plot { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, #[source] source: std::io::Error },
    #[error("could not encode JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Norm(#[from] normlab_norms::NormError),
}

pub type Result<T, E = CompareError> = std::result::Result<T, E>;

/// Attach a path to an I/O error.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CompareError {
    let path = path.into();
    move |source| CompareError::Io { path, source }
}
