//! Writing files that must not be lost: write a temporary sibling, fsync it, rename it over the
//! target, fsync the directory. A crash leaves either the old file or the new one, never a part.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::TrainError;

/// `path` with `suffix` appended to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

/// fsync a file or directory by path (directories: so a rename inside them is durable).
pub(crate) fn sync_path(path: &Path) -> Result<(), TrainError> {
    File::open(path).and_then(|f| f.sync_all()).map_err(TrainError::io(path))
}

/// Write `bytes` to `path` atomically (temporary sibling, fsync, rename, fsync of the directory).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let tmp = sibling(path, ".tmp");
    {
        let mut f = File::create(&tmp).map_err(TrainError::io(&tmp))?;
        f.write_all(bytes).map_err(TrainError::io(&tmp))?;
        f.sync_all().map_err(TrainError::io(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(TrainError::io(path))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        sync_path(dir)?;
    }
    Ok(())
}
