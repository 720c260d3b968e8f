//! `normlab train` refuses bad configs with errors naming the bad key, value or file, before
//! any training (these do not need a model).

use std::process::Command;

fn normlab(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_normlab")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write_config(name: &str, text: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn out_dir(name: &str) -> String {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name).display().to_string()
}

#[test]
fn unknown_key_in_file_is_named() {
    let c = write_config("cli_unknown.toml", "[train]\nsteps = 3\nlearning_rate = 0.1\n");
    let (code, _, err) = normlab(&["train", "--config", &c, "--out", &out_dir("cli_unknown")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("learning_rate") && err.contains("cli_unknown.toml"), "{err}");
}

#[test]
fn bad_overrides_are_named() {
    let c = write_config("cli_ok.toml", "[train]\nsteps = 3\n");
    let (code, _, err) = normlab(&["train", "--config", &c, "--set", "train.lr", "--out", &out_dir("cli_o1")]);
    assert_eq!(code, 1);
    assert!(err.contains("'train.lr'") && err.contains("KEY=VALUE"), "{err}");
    let (code, _, err) = normlab(&["train", "--config", &c, "--set", "train.lrr=1e-3", "--out", &out_dir("cli_o2")]);
    assert_eq!(code, 1);
    assert!(err.contains("lrr"), "{err}");
    let (code, _, err) = normlab(&["train", "--config", &c, "--set", "train.batch_size=0", "--out", &out_dir("cli_o3")]);
    assert_eq!(code, 1);
    assert!(err.contains("train.batch_size") && err.contains('0'), "{err}");
    let (code, _, err) = normlab(&["train", "--config", &c, "--set", "model.norm={ kind = \"l3\" }", "--out", &out_dir("cli_o4")]);
    assert_eq!(code, 1);
    assert!(err.contains("l3"), "{err}");
}

#[test]
fn missing_corpus_and_config_files_are_named() {
    let c = write_config("cli_corpus.toml", "[data]\ncorpus = \"/nonexistent/corpus.txt.gz\"\n");
    let (code, _, err) = normlab(&["train", "--config", &c, "--out", &out_dir("cli_corpus")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("/nonexistent/corpus.txt.gz"), "{err}");
    let (code, _, err) = normlab(&["train", "--config", "/nonexistent/exp.toml", "--out", &out_dir("cli_nf")]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/exp.toml"), "{err}");
}

#[test]
fn bundled_presets_parse() {
    for f in ["experiments/tiny.toml", "experiments/tiny-f16-overflow.toml"] {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
        normlab::train::load_experiment(&p, &[]).unwrap_or_else(|e| panic!("{f}: {e}"));
    }
}
