//! `metrics.jsonl`: one [`Record`] per line, appended and flushed as the run goes.
//!
//! A checkpoint stores the file's length at that moment; resuming truncates the file back to
//! it, so the lines written after the checkpoint by an interrupted segment are replaced by the
//! resumed run's, and a resumed run's file equals an uninterrupted one's.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::TrainError;
use super::record::Record;

/// The metrics file of a run, open for appending.
#[derive(Debug)]
pub struct MetricsLog {
    path: PathBuf,
    file: File,
    len: u64,
}

impl MetricsLog {
    /// Create (or empty) the file.
    pub fn create(path: &Path) -> Result<Self, TrainError> {
        let file = File::create(path).map_err(TrainError::io(path))?;
        Ok(MetricsLog { path: path.to_path_buf(), file, len: 0 })
    }

    /// Open an existing file for a resumed run, cut back to `len` bytes.
    pub fn resume(path: &Path, len: u64) -> Result<Self, TrainError> {
        let mut file = OpenOptions::new().read(true).write(true).open(path).map_err(TrainError::io(path))?;
        let have = file.metadata().map_err(TrainError::io(path))?.len();
        if have < len {
            return Err(TrainError::Checkpoint {
                path: path.to_path_buf(),
                why: format!("the checkpoint expects {len} bytes of metrics but the file has {have}"),
            });
        }
        file.set_len(len).map_err(TrainError::io(path))?;
        file.seek(SeekFrom::Start(len)).map_err(TrainError::io(path))?;
        Ok(MetricsLog { path: path.to_path_buf(), file, len })
    }

    /// Append one record as a line and flush it.
    pub fn append(&mut self, record: &Record) -> Result<(), TrainError> {
        let mut line = serde_json::to_string(record).map_err(|e| TrainError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push('\n');
        self.file.write_all(line.as_bytes()).map_err(TrainError::io(&self.path))?;
        self.file.flush().map_err(TrainError::io(&self.path))?;
        self.len += line.len() as u64;
        Ok(())
    }

    /// Make what was written durable (before a checkpoint records [`MetricsLog::len`]).
    pub fn sync(&self) -> Result<(), TrainError> {
        self.file.sync_data().map_err(TrainError::io(&self.path))
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Read every record of a metrics file (for reports and tests).
pub fn read_records(path: &Path) -> Result<Vec<Record>, TrainError> {
    let text = std::fs::read_to_string(path).map_err(TrainError::io(path))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| TrainError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("line {}: {e}", i + 1)),
            })
        })
        .collect()
}
