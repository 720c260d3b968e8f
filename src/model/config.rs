//! What a model is: architecture, sizes, the norm inside it and its interop switches.
//!
//! Deserialised from the `[model]` table of an experiment TOML (`experiments/*.toml`); every
//! field has a default so a preset only names what it changes. [`ModelConfig::validate`]
//! checks the sizes before anything is allocated.

use serde::{Deserialize, Serialize};

/// The three architectures of the comparison (algorithms.md 1 and 2, anGPT Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// The anGPT paper's baseline: pre-norm RMSNorm, QK-norm with a learnable gain, SwiGLU,
    /// RoPE, no bias.
    GptPlus,
    /// nGPT (Loshchilov et al.): everything on the unit sphere, eigen learning rates.
    NGpt,
    /// anGPT (Franke et al.): nGPT's normalisations replaced by constant nu factors.
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
    /// Initial value of the residual eigen learning rates alpha_A, alpha_M (nGPT, anGPT).
    pub alpha_init: f64,
    /// Their stored scale (nGPT reparametrisation); `None` = `1/sqrt(d_model)`.
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
