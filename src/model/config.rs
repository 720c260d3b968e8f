//! What a model is: architecture, sizes, the norm inside it and its interop switches.
//!
//! Deserialised from the `[model]` table of an experiment TOML (`experiments/*.toml`); every
//! field has a default so a preset only names what it changes. [`ModelConfig::validate`]
//! checks the sizes before anything is allocated.

use serde::{Deserialize, Serialize};

use crate::model::ModelError;

/// The three architectures of the comparison (algorithms.md 1 and 2, anGPT Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// The anGPT paper's baseline: pre-norm RMSNorm, QK-norm with a learnable gain, SwiGLU,
    /// RoPE, no bias.
    #[serde(alias = "gpt+")]
    GptPlus,
    /// nGPT (Loshchilov et al.): everything on the unit sphere, eigen learning rates.
    #[serde(rename = "ngpt", alias = "n_gpt")]
    NGpt,
    /// anGPT (Franke et al.): nGPT's normalisations replaced by constant nu factors.
    #[serde(rename = "angpt", alias = "an_gpt")]
    AnGpt,
}

impl Arch {
    pub const ALL: [Arch; 3] = [Arch::GptPlus, Arch::NGpt, Arch::AnGpt];
    /// The name used in configs, file names and reports: `gpt_plus`, `ngpt`, `angpt`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::GptPlus => "gpt_plus",
            Arch::NGpt => "ngpt",
            Arch::AnGpt => "angpt",
        }
    }
}

/// The normalisation used at every norm site of the model.
///
/// `L2` is each architecture's own exact norm (RMSNorm in GPT+, unit L2 `x/||x||` in nGPT and
/// anGPT). The others replace it at every site, scaled to the same expected magnitude (the
/// model documents how). `Nu` is the approximate normalisation by constant factors (anGPT's
/// own scheme, or the nu-corrected LERP inside nGPT as in the anGPT ablation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NormChoice {
    L2,
    Rms,
    L1,
    LInf,
    TopK { k: usize },
    Nu,
}

impl NormChoice {
    /// Short name for file names and reports: `l2`, `rms`, `l1`, `linf`, `topk8`, `nu`.
    pub fn name(self) -> String {
        match self {
            NormChoice::L2 => "l2".into(),
            NormChoice::Rms => "rms".into(),
            NormChoice::L1 => "l1".into(),
            NormChoice::LInf => "linf".into(),
            NormChoice::TopK { k } => format!("topk{k}"),
            NormChoice::Nu => "nu".into(),
        }
    }
}

/// A model's configuration. Vocabulary 256 (byte tokens) unless a corpus says otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_layers: usize,
    /// MLP hidden size = `mlp_ratio * d_model` for each of SwiGLU's u and z.
    pub mlp_ratio: usize,
    pub norm: NormChoice,
    /// eps of every exact norm (where it is added: see the ops' docs).
    pub norm_eps: f64,
    /// Scale constant of the L1, L-inf and Top-k replacements: `exact` (default, unbiased for
    /// Gaussian input), `code` (the "Norm matters" authors' `c(n)`), `one` (no constant: the
    /// paper's 4.1 ablation). Ignored by L2 and RMS.
    pub norm_constant: normlab_norms::ConstMode,
    /// Initial value of the residual eigen learning rates alpha_A, alpha_M (nGPT, anGPT).
    pub alpha_init: f64,
    /// Their stored scale (nGPT reparametrisation: stored value initialised to the scale,
    /// multiplied by `init/scale` at use). `None` = the architecture's default:
    /// `1/sqrt(d_model)` for nGPT (NVIDIA/ngpt `base_scale`), `0.01` for anGPT (its paper's
    /// Table F.2 "Param. Scale Init", also used for its s_Z).
    pub alpha_scale: Option<f64>,
    /// anGPT: multiplier on SwiGLU's gate pre-activation (`None` = `sqrt(d_model)`, the
    /// assumption that reproduces nu_acf ~ 3.74, algorithms.md 2.5).
    pub gate_scale: Option<f64>,
    /// anGPT: bound each weight row (`false`) or the whole matrix (`true`) to norm <= 1.
    pub angpt_frobenius_bound: bool,
    /// nGPT: reproduce NVIDIA/ngpt's RoPE and MLP scaling (algorithms.md 1.3.1, 1.7).
    pub ngpt_code_interop: bool,
    /// GPT+: QK-norm with a learnable gain (the paper's baseline has it).
    pub qk_norm: bool,
    /// Std of the initial weights where the architecture does not normalise them (GPT+).
    pub init_std: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            arch: Arch::GptPlus,
            vocab: crate::data::VOCAB_SIZE,
            d_model: 64,
            n_heads: 4,
            n_layers: 2,
            mlp_ratio: 4,
            norm: NormChoice::L2,
            norm_eps: 1e-6,
            norm_constant: normlab_norms::ConstMode::Exact,
            alpha_init: 0.05,
            alpha_scale: None,
            gate_scale: None,
            angpt_frobenius_bound: false,
            ngpt_code_interop: false,
            qk_norm: true,
            init_std: 0.02,
        }
    }
}

impl ModelConfig {
    /// Head size `d_model / n_heads`.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }
}

impl Arch {
    /// Parse a config or command-line name (`gpt_plus`/`gpt+`, `ngpt`, `angpt`).
    pub fn parse(s: &str) -> Result<Arch, ModelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "gpt_plus" | "gpt+" | "gptplus" | "gpt-plus" => Ok(Arch::GptPlus),
            "ngpt" => Ok(Arch::NGpt),
            "angpt" => Ok(Arch::AnGpt),
            _ => Err(ModelError::UnknownArch(s.to_string())),
        }
    }
}

impl NormChoice {
    /// Parse the short name of [`NormChoice::name`] (`l2`, `rms`, `l1`, `linf`, `topkK`, `nu`),
    /// e.g. for a command-line override. Anything else is [`ModelError::UnknownNorm`].
    pub fn parse(s: &str) -> Result<NormChoice, ModelError> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "l2" => Ok(NormChoice::L2),
            "rms" => Ok(NormChoice::Rms),
            "l1" => Ok(NormChoice::L1),
            "linf" | "l_inf" | "l-inf" => Ok(NormChoice::LInf),
            "nu" => Ok(NormChoice::Nu),
            _ => match t.strip_prefix("topk").map(str::parse::<usize>) {
                Some(Ok(k)) => Ok(NormChoice::TopK { k }),
                _ => Err(ModelError::UnknownNorm(s.to_string())),
            },
        }
    }
}

impl ModelConfig {
    /// MLP hidden width `mlp_ratio * d_model` (each of SwiGLU's two halves).
    pub fn mlp_hidden(&self) -> usize {
        self.mlp_ratio * self.d_model
    }

    /// The stored scale of the residual eigen learning rates (and of anGPT's s_Z): the configured
    /// one or the architecture's default (see the field's doc).
    pub fn alpha_scale_or_default(&self) -> f64 {
        self.alpha_scale.unwrap_or(match self.arch {
            Arch::AnGpt => 0.01,
            _ => 1.0 / (self.d_model as f64).sqrt(),
        })
    }

    /// Check every size and switch before anything is allocated. Each error names the field
    /// and its value.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field: &'static str, value: String, why: &'static str| Err(ModelError::InvalidConfig { field, value, why });
        for (field, v) in [("vocab", self.vocab), ("d_model", self.d_model), ("n_heads", self.n_heads), ("n_layers", self.n_layers), ("mlp_ratio", self.mlp_ratio)] {
            if v == 0 {
                return bad(field, "0".into(), "must be at least 1");
            }
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return bad("n_heads", format!("{} (d_model = {})", self.n_heads, self.d_model), "must divide d_model");
        }
        if !self.head_dim().is_multiple_of(2) {
            return bad("n_heads", format!("{} (head dim {})", self.n_heads, self.head_dim()), "RoPE needs an even head dimension");
        }
        if self.d_model.checked_mul(self.mlp_ratio).and_then(|r| r.checked_mul(2)).is_none() {
            return bad("mlp_ratio", self.mlp_ratio.to_string(), "mlp_ratio * d_model overflows");
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return bad("norm_eps", self.norm_eps.to_string(), "must be finite and >= 0");
        }
        if !self.alpha_init.is_finite() {
            return bad("alpha_init", self.alpha_init.to_string(), "must be finite");
        }
        if let Some(s) = self.alpha_scale {
            if !(s.is_finite() && s > 0.0) {
                return bad("alpha_scale", s.to_string(), "must be finite and > 0");
            }
        }
        if let Some(g) = self.gate_scale {
            if !(g.is_finite() && g > 0.0) {
                return bad("gate_scale", g.to_string(), "must be finite and > 0");
            }
        }
        if !(self.init_std.is_finite() && self.init_std > 0.0) {
            return bad("init_std", self.init_std.to_string(), "must be finite and > 0");
        }
        let unsupported = |why: String| Err(ModelError::Unsupported { arch: self.arch.name(), norm: self.norm.name(), why });
        if self.ngpt_code_interop && self.arch != Arch::NGpt {
            return unsupported("ngpt_code_interop reproduces NVIDIA/ngpt and applies only to arch = ngpt".into());
        }
        if self.arch == Arch::GptPlus && self.norm == NormChoice::Nu {
            return unsupported("GPT+ has no approximate (nu) normalisation; nu applies to anGPT and to nGPT's LERP".into());
        }
        if let NormChoice::TopK { k } = self.norm {
            // The narrowest norm site: per-head q/k (d_h) unless GPT+ runs without QK-norm.
            let narrowest = if self.arch == Arch::GptPlus && !self.qk_norm { self.d_model } else { self.head_dim() };
            if k == 0 || k > narrowest {
                return unsupported(format!("top-k with k = {k} needs 1 <= k <= {narrowest} (the narrowest norm site of this model)"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Config files, `--set` overrides, presets and reports all use `Arch::name()`: serde must
    /// read and write exactly that spelling (and `Arch::parse` must accept it).
    #[test]
    fn serde_names_are_the_report_names() {
        #[derive(Deserialize, Serialize)]
        struct W {
            arch: Arch,
        }
        for arch in Arch::ALL {
            let text = format!("arch = \"{}\"\n", arch.name());
            let w: W = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", arch.name()));
            assert_eq!(w.arch, arch);
            assert_eq!(toml::to_string(&W { arch }).unwrap(), text);
            assert_eq!(Arch::parse(arch.name()).unwrap(), arch);
        }
        let old: W = toml::from_str("arch = \"n_gpt\"").unwrap();
        assert_eq!(old.arch, Arch::NGpt);
    }
}
