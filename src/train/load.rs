//! Reading an experiment TOML with `--set KEY=VALUE` overrides, and checking the values.
//!
//! An override's KEY is a dotted path into the file's tables (`train.lr`, `model.norm.kind`);
//! its VALUE is read as a TOML value (`1e-3`, `true`, `"pure_f16"`, `{ kind = "top_k", k = 8 }`),
//! and, when that fails, as a bare string (`--set train.precision=pure_f16`). The result is then
//! read with unknown keys refused, so a misspelt key in the file or in an override is an error
//! that names it.

use std::path::Path;

use serde::Deserialize;

use super::config::ExperimentConfig;
use super::error::TrainError;

/// Read `path` and apply `overrides` in order.
pub fn load_experiment(path: &Path, overrides: &[String]) -> Result<ExperimentConfig, TrainError> {
    let text = std::fs::read_to_string(path).map_err(TrainError::io(path))?;
    parse_experiment(&text, &path.display().to_string(), overrides)
}

/// Parse experiment TOML `text` (from `origin`, for messages) and apply `overrides`.
pub fn parse_experiment(text: &str, origin: &str, overrides: &[String]) -> Result<ExperimentConfig, TrainError> {
    let config_err = |message: String| TrainError::Config { origin: origin.to_string(), message };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| config_err(e.to_string()))?;
    for o in overrides {
        apply_override(&mut table, o)?;
    }
    let cfg = if overrides.is_empty() {
        toml::from_str::<ExperimentConfig>(text).map_err(|e| config_err(e.to_string()))?
    } else {
        // Re-render so the error (if any) quotes the offending line of the merged config.
        let merged = toml::to_string(&table).map_err(|e| config_err(e.to_string()))?;
        toml::from_str::<ExperimentConfig>(&merged)
            .map_err(|e| config_err(format!("after overrides {overrides:?}: {e}")))?
    };
    validate(&cfg)?;
    Ok(cfg)
}

/// Set `KEY=VALUE` in `table`.
pub fn apply_override(table: &mut toml::Table, spec: &str) -> Result<(), TrainError> {
    let bad = |why: &str| TrainError::BadOverride { value: spec.to_string(), why: why.to_string() };
    let (key, raw) = spec.split_once('=').ok_or_else(|| bad("expected KEY=VALUE, e.g. train.lr=1e-3"))?;
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if key.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err(bad("the key must be a dotted path such as train.lr"));
    }
    let value = parse_value(raw.trim());
    let (last, path) = parts.split_last().ok_or_else(|| bad("empty key"))?;
    let mut cur = table;
    for p in path {
        let entry = cur.entry(p.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = entry.as_table_mut().ok_or_else(|| bad(&format!("{p} is a value, not a table")))?;
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

/// A TOML value, or the text itself as a string when it is not one.
fn parse_value(raw: &str) -> toml::Value {
    #[derive(Deserialize)]
    struct Holder {
        v: toml::Value,
    }
    toml::from_str::<Holder>(&format!("v = {raw}")).map(|h| h.v).unwrap_or_else(|_| toml::Value::String(raw.to_string()))
}

/// Check the training values that would otherwise fail late or silently.
pub fn validate(cfg: &ExperimentConfig) -> Result<(), TrainError> {
    let t = &cfg.train;
    let bad = |key: &'static str, value: String, why: &'static str| Err(TrainError::BadValue { key, value, why });
    if t.steps == 0 {
        return bad("train.steps", "0".into(), "a run needs at least 1 step");
    }
    if t.batch_size == 0 {
        return bad("train.batch_size", "0".into(), "must be at least 1");
    }
    if t.seq_len == 0 {
        return bad("train.seq_len", "0".into(), "must be at least 1");
    }
    if !(t.lr.is_finite() && t.lr >= 0.0) {
        return bad("train.lr", t.lr.to_string(), "must be finite and >= 0");
    }
    if !(t.min_lr.is_finite() && t.min_lr >= 0.0) {
        return bad("train.min_lr", t.min_lr.to_string(), "must be finite and >= 0");
    }
    if !(0.0..1.0).contains(&t.beta1) {
        return bad("train.beta1", t.beta1.to_string(), "must be in [0, 1)");
    }
    if !(0.0..1.0).contains(&t.beta2) {
        return bad("train.beta2", t.beta2.to_string(), "must be in [0, 1)");
    }
    if !(t.adam_eps.is_finite() && t.adam_eps > 0.0) {
        return bad("train.adam_eps", t.adam_eps.to_string(), "must be finite and > 0");
    }
    if !(t.weight_decay.is_finite() && t.weight_decay >= 0.0) {
        return bad("train.weight_decay", t.weight_decay.to_string(), "must be finite and >= 0");
    }
    if !(t.grad_clip.is_finite() && t.grad_clip >= 0.0) {
        return bad("train.grad_clip", t.grad_clip.to_string(), "must be finite and >= 0 (0 = off)");
    }
    if !(t.loss_scale_init.is_finite() && t.loss_scale_init >= 1.0) {
        return bad("train.loss_scale_init", t.loss_scale_init.to_string(), "must be finite and >= 1");
    }
    if t.loss_scale_growth_interval == 0 {
        return bad("train.loss_scale_growth_interval", "0".into(), "must be at least 1");
    }
    if t.eval_batches == 0 {
        return bad("train.eval_batches", "0".into(), "must be at least 1");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::Precision;

    #[test]
    fn overrides_apply_and_coerce() {
        let cfg = parse_experiment(
            "[train]\nsteps = 10\n",
            "t.toml",
            &["train.lr=1e-3".into(), "train.precision=pure_f16".into(), "model.norm={ kind = \"top_k\", k = 8 }".into()],
        )
        .unwrap();
        assert_eq!(cfg.train.steps, 10);
        assert_eq!(cfg.train.lr, 1e-3);
        assert_eq!(cfg.train.precision, Precision::PureF16);
        assert_eq!(cfg.model.norm, crate::model::NormChoice::TopK { k: 8 });
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse_experiment("[train]\nlrr = 1.0\n", "x.toml", &[]).unwrap_err().to_string();
        assert!(e.contains("lrr") && e.contains("x.toml"), "{e}");
        let e = parse_experiment("", "x.toml", &["train.stepz=3".into()]).unwrap_err().to_string();
        assert!(e.contains("stepz"), "{e}");
        let e = parse_experiment("", "x.toml", &["train.lr=fast".into()]).unwrap_err().to_string();
        assert!(e.contains("lr") && e.contains("fast"), "{e}");
        let e = parse_experiment("", "x.toml", &["train.lr".into()]).unwrap_err().to_string();
        assert!(e.contains("train.lr") && e.contains("KEY=VALUE"), "{e}");
        let e = parse_experiment("", "x.toml", &["train.steps=2".into(), "train.steps.x=1".into()]).unwrap_err().to_string();
        assert!(e.contains("train.steps.x=1") && e.contains("steps is a value"), "{e}");
        let e = parse_experiment("", "x.toml", &["train.beta2=1.5".into()]).unwrap_err().to_string();
        assert!(e.contains("train.beta2") && e.contains("1.5"), "{e}");
        let e = parse_experiment("[model]\nnorm = { kind = \"l3\" }\n", "x.toml", &[]).unwrap_err().to_string();
        assert!(e.contains("l3"), "{e}");
        let e = parse_experiment("", "x.toml", &["train.fp8_norm_io=yes".into()]).unwrap_err().to_string();
        assert!(e.contains("fp8_norm_io") && e.contains("yes"), "{e}");
        assert!(parse_experiment("", "x.toml", &["train.fp8_norm_io=true".into()]).unwrap().train.fp8_norm_io);
    }
}
