//! sha256 of a corpus text and the `.sha256` file that may sit beside it.
//!
//! The checksum is always of the *uncompressed* text, so it does not depend on which gzip
//! implementation or level produced the `.gz` file. The file uses `sha256sum` format: 64 hex
//! digits, then optionally whitespace and a file name (ignored).
//!
//! Which file is "beside" a corpus `DIR/NAME.EXT...`: the first that exists of `DIR/NAME.EXT....sha256`
//! and then the names left by stripping one known extension (`.gz`, then `.txt`) at a time, each
//! with `.sha256` appended. For `shakespeare.txt.gz` that is `shakespeare.txt.gz.sha256`,
//! `shakespeare.txt.sha256`, `shakespeare.sha256`.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::{DataError, Result};

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The checksum file beside `corpus`, if one exists (rule in the module doc).
pub fn checksum_file_for(corpus: &Path) -> Option<PathBuf> {
    let dir = corpus.parent().unwrap_or_else(|| Path::new(""));
    let mut name = corpus.file_name()?.to_string_lossy().into_owned();
    loop {
        let candidate = dir.join(format!("{name}.sha256"));
        if candidate.is_file() {
            return Some(candidate);
        }
        let stripped = [".gz", ".txt"]
            .iter()
            .find_map(|ext| name.strip_suffix(ext));
        match stripped {
            Some(rest) if !rest.is_empty() => name = rest.to_string(),
            _ => return None,
        }
    }
}

/// The expected hash listed in `checksum_file`, lower-cased.
pub fn read_expected(checksum_file: &Path) -> Result<String> {
    let text = std::fs::read_to_string(checksum_file).map_err(|source| DataError::Io {
        path: checksum_file.to_path_buf(),
        source,
    })?;
    let first = text.split_whitespace().next().unwrap_or("");
    if first.len() != 64 || !first.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(DataError::BadChecksumFile {
            path: checksum_file.to_path_buf(),
            found: first.chars().take(80).collect(),
        });
    }
    Ok(first.to_ascii_lowercase())
}

/// Check `text` (the decoded corpus at `corpus`) against the checksum file beside it.
///
/// Returns the verified hash, or `None` when no checksum file is present (nothing to check).
pub fn verify_beside(corpus: &Path, text: &[u8]) -> Result<Option<String>> {
    let Some(checksum_file) = checksum_file_for(corpus) else {
        return Ok(None);
    };
    let expected = read_expected(&checksum_file)?;
    let actual = sha256_hex(text);
    if actual != expected {
        return Err(DataError::ChecksumMismatch {
            path: corpus.to_path_buf(),
            checksum_file,
            expected,
            actual,
        });
    }
    Ok(Some(actual))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_strings() {
        // FIPS 180-2 test vectors.
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
