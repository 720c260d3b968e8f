//! The comparison directory and its manifest (`DIR/manifest.json`).
//!
//! The manifest ties a directory to one preset (its name and hash). [`prepare_dir`] refuses,
//! with a typed error and without touching anything, a directory that holds another preset's
//! comparison, a corrupt manifest, or anything else (a non-empty directory with no manifest,
//! a file): results are never overwritten by accident.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{io_err, CompareError, Result};
use super::fsio::write_json_atomic;
use super::preset::Preset;

/// Schema tag of `manifest.json`.
pub const MANIFEST_SCHEMA: &str = "normlab.compare/1";
pub const MANIFEST_FILE: &str = "manifest.json";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub preset_name: String,
    pub preset_hash: String,
    /// The cells of the preset, in run order.
    pub cells: Vec<String>,
    /// Seconds since the Unix epoch when the directory was created.
    pub created_unix: u64,
}

/// The run directory of a cell.
pub fn run_dir(dir: &Path, cell: &str) -> PathBuf {
    dir.join("runs").join(cell)
}

/// Read and check `DIR/manifest.json` (schema tag and shape).
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
    let m: Manifest = serde_json::from_str(&text).map_err(|e| CompareError::CorruptManifest { path: path.clone(), why: e.to_string() })?;
    if m.schema != MANIFEST_SCHEMA {
        return Err(CompareError::CorruptManifest { path, why: format!("schema '{}' is not '{MANIFEST_SCHEMA}'", m.schema) });
    }
    Ok(m)
}

/// Make `dir` ready for `preset`: create it with a manifest, or accept it when its manifest is
/// for the same preset (a resumed comparison). Anything else is an error.
pub fn prepare_dir(dir: &Path, preset: &Preset) -> Result<Manifest> {
    if dir.exists() && !dir.is_dir() {
        return Err(CompareError::NotADirectory { path: dir.to_path_buf() });
    }
    let manifest_path = dir.join(MANIFEST_FILE);
    if manifest_path.exists() {
        let m = read_manifest(dir)?;
        if m.preset_hash != preset.hash || m.preset_name != preset.name {
            return Err(CompareError::ForeignPreset {
                path: dir.to_path_buf(),
                found_name: m.preset_name,
                found_hash: m.preset_hash,
                expected_name: preset.name.clone(),
                expected_hash: preset.hash.clone(),
            });
        }
        return Ok(m);
    }
    if dir.is_dir() {
        let mut entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
        if entries.next().is_some() {
            return Err(CompareError::NotACompareDir { path: dir.to_path_buf() });
        }
    }
    std::fs::create_dir_all(dir.join("runs")).map_err(io_err(dir))?;
    let m = Manifest {
        schema: MANIFEST_SCHEMA.to_string(),
        preset_name: preset.name.clone(),
        preset_hash: preset.hash.clone(),
        cells: preset.cells.iter().map(|c| c.name.clone()).collect(),
        created_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    };
    write_json_atomic(&manifest_path, &m)?;
    Ok(m)
}
