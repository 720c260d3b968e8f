//! Why a run could not be done. Every variant names the value, key or file at fault.

use std::path::PathBuf;

/// Why a run could not be done.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    #[error(transparent)]
    Data(#[from] crate::data::DataError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// The experiment file could not be read or does not describe an [`super::ExperimentConfig`]
    /// (the message names the unknown or mistyped key).
    #[error("config {origin}: {message}")]
    Config { origin: String, message: String },
    /// A `--set KEY=VALUE` override that cannot be applied.
    #[error("bad override '{value}': {why}")]
    BadOverride { value: String, why: String },
    /// A configuration value outside its domain.
    #[error("invalid {key} = {value}: {why}")]
    BadValue { key: &'static str, value: String, why: &'static str },
    /// A configured feature this build does not implement.
    #[error("{key} = {value} is not supported: {why}")]
    Unsupported { key: &'static str, value: String, why: &'static str },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// A checkpoint that cannot be read back (truncated, edited, from another config).
    #[error("checkpoint {path} is unusable: {why}")]
    Checkpoint { path: PathBuf, why: String },
    /// The output directory holds another run and resuming was not asked for.
    #[error("{path} already holds a run (metrics.jsonl or checkpoint/); pass --resume to continue it or choose another --out")]
    OutDirInUse { path: PathBuf },
}

impl TrainError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
        let path = path.into();
        move |source| TrainError::Io { path, source }
    }
}
