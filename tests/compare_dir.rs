//! The output directory of `normlab compare`: a corrupt manifest, another preset's comparison,
//! a non-empty directory that is not a comparison, or a file give a clear error and are left
//! untouched.

use crate::compare_common;

use std::process::Command;

use compare_common::*;
use normlab::compare::manifest::{prepare_dir, read_manifest, MANIFEST_FILE};
use normlab::compare::{CompareError, Preset};

fn preset(seeds: &str) -> Preset {
    Preset::parse(&preset_text(seeds), "synthetic").unwrap()
}

#[test]
fn fresh_or_empty_directory_gets_a_manifest_and_is_accepted_again() {
    let dir = temp_dir("fresh");
    let p = preset("1");
    let m = prepare_dir(&dir, &p).unwrap();
    assert_eq!(m.preset_hash, p.hash);
    assert_eq!(read_manifest(&dir).unwrap(), m);
    assert_eq!(prepare_dir(&dir, &p).unwrap(), m, "same preset: accepted as is");
    let empty = temp_dir("empty");
    std::fs::create_dir_all(&empty).unwrap();
    prepare_dir(&empty, &p).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn foreign_corrupt_and_unrelated_directories_are_refused_untouched() {
    let p = preset("1");
    // Another preset's comparison.
    let dir = temp_dir("foreign");
    prepare_dir(&dir, &preset("1, 2")).unwrap();
    let before = std::fs::read(dir.join(MANIFEST_FILE)).unwrap();
    let e = prepare_dir(&dir, &p).unwrap_err();
    assert!(matches!(e, CompareError::ForeignPreset { .. }), "{e}");
    assert!(e.to_string().contains(&p.hash) && e.to_string().contains(&dir.display().to_string()), "{e}");
    assert_eq!(std::fs::read(dir.join(MANIFEST_FILE)).unwrap(), before);

    // A corrupt manifest.
    std::fs::write(dir.join(MANIFEST_FILE), b"{\"schema\": \"normlab.compare/1\", \"preset_na").unwrap();
    let e = prepare_dir(&dir, &p).unwrap_err();
    assert!(matches!(e, CompareError::CorruptManifest { .. }), "{e}");
    assert_eq!(std::fs::read(dir.join(MANIFEST_FILE)).unwrap(), b"{\"schema\": \"normlab.compare/1\", \"preset_na");
    // A manifest of another kind of file.
    std::fs::write(dir.join(MANIFEST_FILE), br#"{"schema":"other/1","preset_name":"x","preset_hash":"y","cells":[],"created_unix":0}"#).unwrap();
    assert!(prepare_dir(&dir, &p).unwrap_err().to_string().contains("schema 'other/1'"));

    // A non-empty directory that is not a comparison.
    let other = temp_dir("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"keep me").unwrap();
    let e = prepare_dir(&other, &p).unwrap_err();
    assert!(matches!(e, CompareError::NotACompareDir { .. }), "{e}");
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"keep me");

    // A file.
    let file = other.join("notes.txt");
    assert!(matches!(prepare_dir(&file, &p), Err(CompareError::NotADirectory { .. })));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other);
}

#[test]
fn cli_refuses_a_foreign_directory_with_a_clear_error() {
    let dir = temp_dir("cli-foreign");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data.bin"), b"x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_normlab")).args(["compare", "--preset", "mini", "--out"]).arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("non-empty directory without a comparison manifest") && err.contains(&dir.display().to_string()), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_normlab")).args(["compare", "--preset", "tiny", "--out"]).arg(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown preset 'tiny'"));
    let _ = std::fs::remove_dir_all(&dir);
}
