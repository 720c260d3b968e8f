//! Checkpoints: `OUT/checkpoint/` holds
//!
//! - `params.safetensors`: every parameter in its storage dtype ([`ParamStore::save_safetensors`]);
//! - `optimizer.safetensors`: Adam's moments (`m/NAME`, `v/NAME`) in the state dtype;
//! - `state.json`: [`CheckpointState`]: steps done, Adam's step count, the loss scaler, the
//!   length of `metrics.jsonl` at that moment, the running totals, the config hash and the
//!   sha256 of both tensor files (so a damaged file is refused by name, not loaded).
//!
//! Written atomically as a directory: everything goes to `checkpoint.tmp/` and is fsynced, then
//! the old `checkpoint/` is renamed to `checkpoint.old/`, `checkpoint.tmp/` to `checkpoint/`, and
//! `checkpoint.old/` removed. A crash at any point leaves a complete `checkpoint/` or
//! `checkpoint.old/`; [`load`] takes the first that exists.

use std::path::{Path, PathBuf};

use candle_core::Device;
use serde::{Deserialize, Serialize};

use super::error::TrainError;
use super::files::{sync_path, write_atomic};
use super::loss_scale::LossScaler;
use super::optim::AdamW;
use super::totals::RunTotals;
use crate::data::checksum::sha256_hex;
use crate::model::ParamStore;

/// Format tag of `state.json`.
pub const FORMAT: &str = "normlab.checkpoint/1";
pub const DIR: &str = "checkpoint";
const PARAMS: &str = "params.safetensors";
const OPTIMIZER: &str = "optimizer.safetensors";
const STATE: &str = "state.json";

/// Everything of a run that is not a tensor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointState {
    pub format: String,
    pub config_hash: String,
    /// Optimizer steps completed (the next step has 0-based index `step`).
    pub step: u64,
    /// Adam's bias-correction count (lower than `step` by the skipped steps).
    pub adam_steps: u64,
    pub loss_scaler: Option<LossScaler>,
    pub metrics_len: u64,
    pub totals: RunTotals,
    pub params_sha256: String,
    pub optimizer_sha256: String,
}

/// `OUT/checkpoint`.
pub fn dir(out: &Path) -> PathBuf {
    out.join(DIR)
}

fn old_dir(out: &Path) -> PathBuf {
    out.join("checkpoint.old")
}

fn tmp_dir(out: &Path) -> PathBuf {
    out.join("checkpoint.tmp")
}

/// Whether `out` holds a checkpoint (complete or the previous one of an interrupted swap).
pub fn exists(out: &Path) -> bool {
    dir(out).join(STATE).is_file() || old_dir(out).join(STATE).is_file()
}

fn file_sha256(path: &Path) -> Result<String, TrainError> {
    let bytes = std::fs::read(path).map_err(TrainError::io(path))?;
    Ok(sha256_hex(&bytes))
}

fn bad(path: &Path, why: impl Into<String>) -> TrainError {
    TrainError::Checkpoint { path: path.to_path_buf(), why: why.into() }
}

/// Write a checkpoint of `store`, `opt` and `state` (its sha256 fields are filled in here).
pub fn save(out: &Path, store: &ParamStore, opt: &AdamW, mut state: CheckpointState) -> Result<(), TrainError> {
    let tmp = tmp_dir(out);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(TrainError::io(&tmp))?;
    let params = tmp.join(PARAMS);
    store.save_safetensors(&params).map_err(|e| bad(&params, e.to_string()))?;
    sync_path(&params)?;
    let optim = tmp.join(OPTIMIZER);
    candle_core::safetensors::save(&opt.tensors(store), &optim)?;
    sync_path(&optim)?;
    state.params_sha256 = file_sha256(&params)?;
    state.optimizer_sha256 = file_sha256(&optim)?;
    state.format = FORMAT.to_string();
    let json = serde_json::to_vec_pretty(&state).map_err(|e| bad(&tmp, e.to_string()))?;
    write_atomic(&tmp.join(STATE), &json)?;
    sync_path(&tmp)?;

    let (cur, old) = (dir(out), old_dir(out));
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(TrainError::io(&old))?;
    }
    if cur.exists() {
        std::fs::rename(&cur, &old).map_err(TrainError::io(&cur))?;
    }
    std::fs::rename(&tmp, &cur).map_err(TrainError::io(&tmp))?;
    sync_path(out)?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(TrainError::io(&old))?;
    }
    Ok(())
}

/// Read the checkpoint under `out` into `store` and `opt`; `None` when there is none.
/// Every failure names the file and what is wrong with it.
pub fn load(out: &Path, store: &ParamStore, opt: &mut AdamW, device: &Device) -> Result<Option<CheckpointState>, TrainError> {
    let d = if dir(out).join(STATE).is_file() {
        dir(out)
    } else if old_dir(out).join(STATE).is_file() {
        old_dir(out)
    } else {
        return Ok(None);
    };
    let state_path = d.join(STATE);
    let text = std::fs::read(&state_path).map_err(TrainError::io(&state_path))?;
    let state: CheckpointState = serde_json::from_slice(&text).map_err(|e| bad(&state_path, e.to_string()))?;
    if state.format != FORMAT {
        return Err(bad(&state_path, format!("format {:?}, expected {FORMAT:?}", state.format)));
    }
    let params = d.join(PARAMS);
    let sha = file_sha256(&params)?;
    if sha != state.params_sha256 {
        return Err(bad(&params, format!("sha256 {sha} does not match {} recorded in state.json", state.params_sha256)));
    }
    store.load_safetensors(&params, device).map_err(|e| bad(&params, e.to_string()))?;
    let optim = d.join(OPTIMIZER);
    let sha = file_sha256(&optim)?;
    if sha != state.optimizer_sha256 {
        return Err(bad(&optim, format!("sha256 {sha} does not match {} recorded in state.json", state.optimizer_sha256)));
    }
    let tensors = candle_core::safetensors::load(&optim, device).map_err(|e| bad(&optim, e.to_string()))?;
    opt.restore(store, &tensors, state.adam_steps).map_err(|why| bad(&optim, why))?;
    Ok(Some(state))
}
