//! What a normalization is: its kind, centring, eps and scale constant.
//!
//! Every norm here has the same shape:
//!
//! ```text
//! z = x - mu          (mu = mean(x) when centred, 0 otherwise)
//! D = denominator(z)  (kind-specific, eps included as documented below)
//! y = (z / D) * w + b (optional affine)
//! ```
//!
//! | kind | centred | D | where eps goes |
//! |---|---|---|---|
//! | `Rms` | no | `sqrt(mean(z^2) + eps)` | inside the sqrt, added in the accumulator |
//! | `Layer` | yes | `sqrt(var(z) + eps)`, var = biased (divide by n), two-pass | inside the sqrt |
//! | `UnitL2` | no | `max(‖z‖_2, eps)` | a clamp on the norm (PyTorch `F.normalize`) |
//! | `L1` | option | `C * mean|z| + eps` | added to the scale ("Norm matters" code) |
//! | `LInf` | option | `C * max|z| + eps` | added to the scale |
//! | `TopK{k}` | option | `C * mean(k largest |z|) + eps` | added to the scale |
//!
//! eps is always applied in the accumulator's precision (f32 by default), never in the storage
//! type, so an eps below the fp16 range (1e-12) still protects an all-zero row.
//! `C` is chosen by [`ConstMode`].

use crate::constants;
use crate::error::{NormError, Result};

/// The kind of normalization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum NormKind {
    /// RMSNorm: `x * rsqrt(mean(x^2) + eps)`.
    Rms,
    /// LayerNorm (or batch norm in the batch forms): `(x - mean) * rsqrt(var + eps)`.
    Layer,
    /// Unit L2: `x / max(‖x‖_2, eps)` (nGPT's `Norm`).
    UnitL2,
    /// L1: `(x - mu) / (C_L1 * mean|x - mu| + eps)`.
    L1,
    /// L-infinity: `(x - mu) / (C_inf(n) * max|x - mu| + eps)`.
    LInf,
    /// Top-k: `(x - mu) / (C_topk(n, k) * mean of the k largest |x - mu| + eps)`.
    TopK { k: usize },
}

impl NormKind {
    pub fn name(&self) -> &'static str {
        match self {
            NormKind::Rms => "rms",
            NormKind::Layer => "layer",
            NormKind::UnitL2 => "unit-l2",
            NormKind::L1 => "l1",
            NormKind::LInf => "linf",
            NormKind::TopK { .. } => "topk",
        }
    }
    /// Whether the kind allows choosing centring (`L1`, `LInf`, `TopK`); the others are fixed.
    pub fn centring_is_optional(&self) -> bool {
        matches!(self, NormKind::L1 | NormKind::LInf | NormKind::TopK { .. })
    }
}

/// Which scale constant `C` the L1, L-inf and Top-k norms use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConstMode {
    /// Unbiased for Gaussian input: `C_L1 = sqrt(pi/2) = 1/E|Z|`, `C_inf(n) = 1/E[max_i |Z_i|]`
    /// and `C_topk(n, k) = 1/E[mean of the k largest |Z_i|]`, exact from the order statistics
    /// of |N(0,1)| (`constants`), so that `D` estimates the standard deviation.
    #[default]
    Exact,
    /// The "Norm matters" authors' code: `sqrt(pi/2)` for L1 and
    /// `c(n) = 0.5 (1 + sqrt(pi ln 4)) / sqrt(2 ln n)` for L-inf and every Top-k
    /// (`constants::c_code`), which is biased (output std about 0.7 for k = 1).
    Code,
    /// No constant (`C = 1`), to measure what the constant buys ("Norm matters" 4.1).
    One,
}

/// A fully specified normalization.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NormSpec {
    pub kind: NormKind,
    /// Subtract the mean first. Forced true for `Layer` and false for `Rms` and `UnitL2`.
    pub centred: bool,
    pub eps: f64,
    pub constant: ConstMode,
}

impl NormSpec {
    /// A spec with the kind's natural centring (`Layer` centred, `L1`/`LInf`/`TopK` centred as in
    /// "Norm matters", `Rms`/`UnitL2` not) and the exact constants.
    pub fn new(kind: NormKind, eps: f64) -> Self {
        let centred = matches!(kind, NormKind::Layer | NormKind::L1 | NormKind::LInf | NormKind::TopK { .. });
        NormSpec { kind, centred, eps, constant: ConstMode::Exact }
    }
    pub fn rms(eps: f64) -> Self {
        Self::new(NormKind::Rms, eps)
    }
    pub fn layer(eps: f64) -> Self {
        Self::new(NormKind::Layer, eps)
    }
    pub fn unit_l2(eps: f64) -> Self {
        Self::new(NormKind::UnitL2, eps)
    }
    pub fn l1(eps: f64) -> Self {
        Self::new(NormKind::L1, eps)
    }
    pub fn linf(eps: f64) -> Self {
        Self::new(NormKind::LInf, eps)
    }
    pub fn topk(k: usize, eps: f64) -> Self {
        Self::new(NormKind::TopK { k }, eps)
    }
    pub fn with_centred(mut self, centred: bool) -> Self {
        self.centred = centred;
        self
    }
    pub fn with_constant(mut self, constant: ConstMode) -> Self {
        self.constant = constant;
        self
    }

    /// Check the spec for a reduction over `n` elements; returns the effective centring.
    pub fn validate(&self, n: usize) -> Result<()> {
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(NormError::InvalidEps { eps: self.eps });
        }
        if n == 0 {
            return Err(NormError::Empty { what: "the normalized dimension", value: n });
        }
        if let NormKind::TopK { k } = self.kind {
            if k == 0 || k > n {
                return Err(NormError::InvalidK { k, n });
            }
        }
        match (self.kind, self.centred) {
            (NormKind::Layer, false) => Err(NormError::Unsupported {
                what: "an uncentred LayerNorm".into(),
                why: "that is RMSNorm: use NormKind::Rms".into(),
            }),
            (NormKind::Rms, true) => Err(NormError::Unsupported {
                what: "a centred RMSNorm".into(),
                why: "that is LayerNorm: use NormKind::Layer".into(),
            }),
            (NormKind::UnitL2, true) => Err(NormError::Unsupported {
                what: "a centred unit-L2 norm".into(),
                why: "nGPT's Norm does not centre".into(),
            }),
            _ => Ok(()),
        }
    }

    /// The scale constant `C` for a reduction over `n` elements (1 for the L2 kinds).
    pub fn scale_constant(&self, n: usize) -> Result<f64> {
        Ok(match (self.kind, self.constant) {
            (NormKind::Rms | NormKind::Layer | NormKind::UnitL2, _) => 1.0,
            (_, ConstMode::One) => 1.0,
            (NormKind::L1, _) => constants::C_L1,
            (NormKind::LInf, ConstMode::Exact) => constants::c_inf(n)?,
            (NormKind::TopK { k }, ConstMode::Exact) => constants::c_topk(n, k)?,
            // The authors' code: D = c(n) * statistic + eps for L-inf and every k.
            (NormKind::LInf | NormKind::TopK { .. }, ConstMode::Code) => constants::c_code(n)?,
        })
    }
}
