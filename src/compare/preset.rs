//! A comparison preset: a base experiment config and the matrix
//! `{arch} x {norm variant} x {precision} x {seed}` expanded into cells, one training run each.
//!
//! Preset TOML (`experiments/compare/*.toml`, or any path):
//!
//! ```toml
//! name = "quick"
//! description = "..."
//! nu_samples = 20000            # Monte Carlo samples for the nu_acf claim (optional)
//! [base.model]                  # the [model]/[train]/[data] tables of an experiment TOML
//! d_model = 64
//! [base.train]
//! steps = 200
//! [matrix]
//! archs = ["gpt_plus", "ngpt", "angpt"]
//! precisions = ["f32", "pure_f16"]
//! seeds = [1, 2]
//! variants = [{ norm = { kind = "l2" } }, { norm = { kind = "l1" } },
//!             { norm = { kind = "top_k", k = 8 }, label = "topk8" }]
//! exclude = [{ arch = "gpt_plus", variant = "nu" }]   # cells that do not apply (optional)
//! [matrix.arch_overrides.ngpt.train]                  # per-arch settings (optional)
//! weight_decay = 0.0
//! ```
//!
//! Fairness rule (issue 6): every cell has the same data order, seeds and token budget per
//! model size, so per-arch and per-variant overrides may not touch the budget
//! (`train.steps`, `train.batch_size`, `train.seq_len`, `train.seed`), the model size
//! (`model.d_model`, `n_layers`, `n_heads`, `mlp_ratio`, `vocab`) or `[data]`; that is
//! checked here.
//!
//! The preset hash is the sha256 of the canonical JSON of the expanded cells (names and full
//! configs), so two presets that run the same experiments have the same hash whatever their
//! formatting, and any change to what runs changes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{CompareError, Result};
use crate::model::{Arch, NormChoice};
use crate::train::{ExperimentConfig, Precision};

/// The presets shipped in the binary (`experiments/compare/NAME.toml`).
pub const BUILTIN: [(&str, &str); 4] = [
    ("mini", include_str!("../../experiments/compare/mini.toml")),
    ("quick", include_str!("../../experiments/compare/quick.toml")),
    ("standard", include_str!("../../experiments/compare/standard.toml")),
    ("full", include_str!("../../experiments/compare/full.toml")),
];

/// Default Monte Carlo samples for the nu_acf claim.
pub const DEFAULT_NU_SAMPLES: u64 = 20_000;

/// Budget and size keys an override may not change (see the module doc).
const FIXED_TRAIN_KEYS: [&str; 4] = ["steps", "batch_size", "seq_len", "seed"];
const FIXED_MODEL_KEYS: [&str; 5] = ["d_model", "n_layers", "n_heads", "mlp_ratio", "vocab"];

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    nu_samples: Option<u64>,
    #[serde(default)]
    base: toml::Table,
    matrix: MatrixSpec,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatrixSpec {
    archs: Vec<Arch>,
    variants: Vec<VariantSpec>,
    precisions: Vec<Precision>,
    seeds: Vec<u64>,
    #[serde(default)]
    exclude: Vec<CellPattern>,
    #[serde(default)]
    arch_overrides: BTreeMap<String, toml::Table>,
}

/// One norm variant of the matrix.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantSpec {
    norm: NormChoice,
    /// Name in cell names and reports (default: the norm's short name).
    #[serde(default)]
    label: Option<String>,
    /// Overrides of the `[model]` table for this variant (not the model size).
    #[serde(default)]
    model: Option<toml::Table>,
}

/// Cells to leave out (every given field must match).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CellPattern {
    arch: Option<Arch>,
    variant: Option<String>,
    precision: Option<Precision>,
}

/// One training run of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// `arch-variant-precision-sSEED`, also the run directory under `DIR/runs/`.
    pub name: String,
    pub arch: Arch,
    /// The variant's label (the norm's short name unless the preset names it).
    pub variant: String,
    pub norm: NormChoice,
    pub precision: Precision,
    pub seed: u64,
    pub config: ExperimentConfig,
}

impl Cell {
    /// The cell name for these coordinates.
    pub fn name_for(arch: Arch, variant: &str, precision: Precision, seed: u64) -> String {
        format!("{}-{}-{}-s{}", arch.name(), variant, precision.name(), seed)
    }
}

/// An expanded preset.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Preset {
    pub name: String,
    pub description: String,
    /// The preset file's text (recorded in the report's provenance).
    pub source_text: String,
    pub nu_samples: u64,
    pub cells: Vec<Cell>,
    /// Lower-case hex sha256 of the canonical JSON of the cells.
    pub hash: String,
}

impl Preset {
    /// `spec` is a built-in name (`mini`, `quick`, `standard`, `full`) or a path to a TOML file.
    pub fn load(spec: &str) -> Result<Preset> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == spec) {
            return Preset::parse(text, spec);
        }
        let path = Path::new(spec);
        if path.extension().is_some_and(|e| e == "toml") || path.exists() {
            let text = std::fs::read_to_string(path).map_err(|e| CompareError::PresetParse { source_name: spec.to_string(), message: e.to_string() })?;
            return Preset::parse(&text, spec);
        }
        Err(CompareError::UnknownPreset(spec.to_string()))
    }

    /// Parse and expand a preset text; `source_name` names it in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Preset> {
        let file: PresetFile = toml::from_str(text).map_err(|e| CompareError::PresetParse { source_name: source_name.to_string(), message: e.to_string() })?;
        let invalid = |why: String| CompareError::PresetInvalid { preset: source_name.to_string(), why };
        let m = &file.matrix;
        for (what, len) in [("matrix.archs", m.archs.len()), ("matrix.variants", m.variants.len()), ("matrix.precisions", m.precisions.len()), ("matrix.seeds", m.seeds.len())] {
            if len == 0 {
                return Err(invalid(format!("{what} is empty")));
            }
        }
        if !file.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') || file.name.is_empty() {
            return Err(invalid(format!("name '{}' must be non-empty ASCII letters, digits, '_' or '-'", file.name)));
        }
        for (arch, table) in &m.arch_overrides {
            if !Arch::ALL.iter().any(|a| a.name() == arch) {
                return Err(invalid(format!("matrix.arch_overrides has unknown arch '{arch}' (expected gpt_plus, ngpt or angpt)")));
            }
            check_fixed_keys(table, &["train", "model"], &format!("matrix.arch_overrides.{arch}")).map_err(invalid)?;
        }
        let mut labels = BTreeSet::new();
        let mut variants = Vec::new();
        for v in &m.variants {
            let label = v.label.clone().unwrap_or_else(|| v.norm.name());
            if label.is_empty() || !label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
                return Err(invalid(format!("variant label '{label}' must be lower-case letters, digits or '_'")));
            }
            if !labels.insert(label.clone()) {
                return Err(invalid(format!("variant label '{label}' appears twice")));
            }
            if let Some(model) = &v.model {
                let wrapped: toml::Table = [("model".to_string(), toml::Value::Table(model.clone()))].into_iter().collect();
                check_fixed_keys(&wrapped, &["model"], &format!("variant '{label}'")).map_err(invalid)?;
            }
            variants.push((label, v));
        }
        for (what, dup) in [("matrix.archs", has_dup(m.archs.iter().map(|a| a.name()))), ("matrix.precisions", has_dup(m.precisions.iter().map(|p| p.name()))), ("matrix.seeds", has_dup(m.seeds.iter()))] {
            if dup {
                return Err(invalid(format!("{what} lists a value twice")));
            }
        }
        let mut cells = Vec::new();
        for &arch in &m.archs {
            for (label, v) in &variants {
                for &precision in &m.precisions {
                    if m.exclude.iter().any(|p| p.arch.is_none_or(|a| a == arch) && p.variant.as_ref().is_none_or(|l| l == label) && p.precision.is_none_or(|q| q == precision)) {
                        continue;
                    }
                    for &seed in &m.seeds {
                        let config = cell_config(&file.base, m.arch_overrides.get(arch.name()), v, arch, precision, seed).map_err(|e| invalid(format!("cell {}: {e}", Cell::name_for(arch, label, precision, seed))))?;
                        cells.push(Cell { name: Cell::name_for(arch, label, precision, seed), arch, variant: label.clone(), norm: v.norm, precision, seed, config });
                    }
                }
            }
        }
        if cells.is_empty() {
            return Err(invalid("the exclusions leave no cell".into()));
        }
        let hash = preset_hash(&file.name, &cells)?;
        Ok(Preset { name: file.name, description: file.description, source_text: text.to_string(), nu_samples: file.nu_samples.unwrap_or(DEFAULT_NU_SAMPLES), cells, hash })
    }

    /// The cells' common model config (all cells share the model size).
    pub fn base_model(&self) -> &crate::model::ModelConfig {
        &self.cells[0].config.model
    }
}

fn has_dup<T: Ord, I: Iterator<Item = T>>(it: I) -> bool {
    let mut seen = BTreeSet::new();
    it.into_iter().any(|x| !seen.insert(x))
}

/// Refuse overrides of the budget and the model size, and tables other than `allowed`.
fn check_fixed_keys(table: &toml::Table, allowed: &[&str], what: &str) -> std::result::Result<(), String> {
    for (k, v) in table {
        if !allowed.contains(&k.as_str()) {
            return Err(format!("{what} may not set [{k}] (only {})", allowed.join(", ")));
        }
        let fixed: &[&str] = if k == "train" { &FIXED_TRAIN_KEYS } else { &FIXED_MODEL_KEYS };
        if let Some(t) = v.as_table() {
            if let Some(bad) = t.keys().find(|key| fixed.contains(&key.as_str())) {
                return Err(format!("{what} may not change {k}.{bad}: every cell has the same token budget, data order and model size"));
            }
        }
    }
    Ok(())
}

/// Deep merge `over` into `base` (tables merge key by key, other values replace).
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

fn set(table: &mut toml::Table, section: &str, key: &str, value: toml::Value) {
    let entry = table.entry(section.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(t) = entry {
        t.insert(key.to_string(), value);
    }
}

fn cell_config(base: &toml::Table, arch_over: Option<&toml::Table>, v: &VariantSpec, arch: Arch, precision: Precision, seed: u64) -> std::result::Result<ExperimentConfig, String> {
    let mut t = base.clone();
    if let Some(o) = arch_over {
        merge(&mut t, o);
    }
    if let Some(m) = &v.model {
        let wrapped: toml::Table = [("model".to_string(), toml::Value::Table(m.clone()))].into_iter().collect();
        merge(&mut t, &wrapped);
    }
    let norm = toml::Value::try_from(v.norm).map_err(|e| e.to_string())?;
    set(&mut t, "model", "arch", toml::Value::String(arch.name().into()));
    set(&mut t, "model", "norm", norm);
    set(&mut t, "train", "precision", toml::Value::String(precision.name().into()));
    let seed = i64::try_from(seed).map_err(|_| format!("seed {seed} does not fit a TOML integer"))?;
    set(&mut t, "train", "seed", toml::Value::Integer(seed));
    toml::Value::Table(t).try_into::<ExperimentConfig>().map_err(|e| e.to_string())
}

fn preset_hash(name: &str, cells: &[Cell]) -> Result<String> {
    let canon: Vec<(&str, &ExperimentConfig)> = cells.iter().map(|c| (c.name.as_str(), &c.config)).collect();
    let json = serde_json::to_string(&(name, canon))?;
    Ok(crate::data::checksum::sha256_hex(json.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = r#"
name = "t"
[base.model]
d_model = 32
[base.train]
steps = 10
[matrix]
archs = ["gpt_plus", "angpt"]
precisions = ["f32", "pure_f16"]
seeds = [1, 2]
variants = [{ norm = { kind = "l2" } }, { norm = { kind = "top_k", k = 4 } }]
exclude = [{ arch = "angpt", variant = "topk4" }]
[matrix.arch_overrides.angpt.train]
weight_decay = 0.0
lr = 0.01
"#;

    #[test]
    fn expands_matrix_with_exclusions_and_overrides() {
        let p = Preset::parse(P, "t").unwrap();
        assert_eq!(p.cells.len(), 2 * 2 * 2 + 2 * 2);
        let c = p.cells.iter().find(|c| c.name == "angpt-l2-pure_f16-s2").unwrap();
        assert_eq!(c.config.train.lr, 0.01);
        assert_eq!(c.config.train.seed, 2);
        assert_eq!(c.config.train.steps, 10);
        assert_eq!(c.config.model.d_model, 32);
        assert_eq!(c.config.train.precision, Precision::PureF16);
        let g = p.cells.iter().find(|c| c.name == "gpt_plus-topk4-f32-s1").unwrap();
        assert_eq!(g.config.model.norm, NormChoice::TopK { k: 4 });
        assert_ne!(g.config.train.lr, 0.01);
        assert!(!p.cells.iter().any(|c| c.arch == Arch::AnGpt && c.variant == "topk4"));
        // The hash follows what runs, not the formatting.
        let p2 = Preset::parse(&P.replace("d_model = 32", "d_model   =   32"), "t").unwrap();
        assert_eq!(p.hash, p2.hash);
        let p3 = Preset::parse(&P.replace("steps = 10", "steps = 11"), "t").unwrap();
        assert_ne!(p.hash, p3.hash);
    }

    #[test]
    fn refuses_budget_overrides_and_bad_values() {
        let bad = P.replace("lr = 0.01", "steps = 5");
        let e = Preset::parse(&bad, "t").unwrap_err().to_string();
        assert!(e.contains("train.steps"), "{e}");
        let bad = P.replace("\"pure_f16\"]", "\"pure_f8\"]");
        assert!(matches!(Preset::parse(&bad, "t"), Err(CompareError::PresetParse { .. })));
        let bad = P.replace("seeds = [1, 2]", "seeds = []");
        assert!(Preset::parse(&bad, "t").unwrap_err().to_string().contains("matrix.seeds is empty"));
        assert!(matches!(Preset::load("nonexistent"), Err(CompareError::UnknownPreset(_))));
    }

    #[test]
    fn builtin_presets_parse() {
        for (name, _) in BUILTIN {
            let p = Preset::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(p.name, name);
            let steps = p.cells[0].config.train.steps;
            assert!(p.cells.iter().all(|c| c.config.train.steps == steps && c.config.model.d_model == p.base_model().d_model));
            // The large-activation variants are GPT+'s alone, with init std 0.5; the rest keep the default.
            for c in &p.cells {
                let big = c.variant.ends_with("_bigact");
                assert!(!big || c.arch == Arch::GptPlus, "{name}: {} {}", c.arch.name(), c.variant);
                assert_eq!(c.config.model.init_std == 0.5, big, "{name}: {} {} init_std {}", c.arch.name(), c.variant, c.config.model.init_std);
            }
        }
        // quick: 3 archs x {l2, l1} x {f32, pure f16} + GPT+ x {l2_bigact, l1_bigact} x {f32, pure f16}.
        assert_eq!(Preset::load("quick").unwrap().cells.len(), 3 * 2 * 2 + 2 * 2);
        // standard: (3 archs x 6 variants - GPT+'s nu + GPT+'s two bigact variants) x 4 precisions x 3 seeds.
        assert_eq!(Preset::load("standard").unwrap().cells.len(), (3 * 6 - 1 + 2) * 4 * 3);
    }
}
