//! candle-nn style modules: a configured norm with optional affine parameters.
//!
//! [`Norm`] holds a [`NormSpec`], the accumulator, the optional weight and bias and a shared
//! [`Telemetry`]; the named modules ([`RmsNorm`], [`LayerNorm`], [`UnitNorm`], [`L1Norm`],
//! [`LInfNorm`], [`TopKNorm`]) are `Norm`s with the kind fixed by their constructor. All
//! implement [`candle_core::Module`]. Weight and bias are taken as tensors; pass a
//! `candle_core::Var` (it derefs to its tensor) to train them, and read their gradients with
//! `grads.get(&var)`.

use std::sync::Arc;

use candle_core::{Module, Result, Tensor};
use normlab_norms::{Accum, ConstMode, NormSpec};

use crate::ops::error::OpsError;
use crate::ops::functional::norm;
use crate::ops::telemetry::{Telemetry, TelemetrySnapshot};

/// A norm over the last dimension of size `n`.
#[derive(Clone, Debug)]
pub struct Norm {
    n: usize,
    spec: NormSpec,
    accum: Accum,
    weight: Option<Tensor>,
    bias: Option<Tensor>,
    telemetry: Arc<Telemetry>,
}

impl Norm {
    /// A norm over `n` features, f32 accumulation, no affine, its own telemetry.
    pub fn new(spec: NormSpec, n: usize) -> Self {
        Norm { n, spec, accum: Accum::F32, weight: None, bias: None, telemetry: Telemetry::new() }
    }
    /// Multiply by a per-feature weight (1-D, `n`, the input's dtype).
    pub fn with_weight(mut self, weight: &Tensor) -> Self {
        self.weight = Some(weight.clone());
        self
    }
    /// Add a per-feature bias (1-D, `n`, the input's dtype).
    pub fn with_bias(mut self, bias: &Tensor) -> Self {
        self.bias = Some(bias.clone());
        self
    }
    /// Subtract the row mean first (allowed for L1, L-inf and Top-k; see `NormSpec::validate`).
    pub fn with_centred(mut self, centred: bool) -> Self {
        self.spec = self.spec.with_centred(centred);
        self
    }
    /// The scale constant of L1, L-inf and Top-k.
    pub fn with_constant(mut self, constant: ConstMode) -> Self {
        self.spec = self.spec.with_constant(constant);
        self
    }
    /// The accumulator of the statistics (f32 by default; pure f16/bf16 for the stability study).
    pub fn with_accum(mut self, accum: Accum) -> Self {
        self.accum = accum;
        self
    }
    /// Report counters into a shared telemetry (e.g. one per model).
    pub fn with_telemetry(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = telemetry;
        self
    }
    pub fn n(&self) -> usize {
        self.n
    }
    pub fn spec(&self) -> &NormSpec {
        &self.spec
    }
    pub fn accum(&self) -> Accum {
        self.accum
    }
    pub fn weight(&self) -> Option<&Tensor> {
        self.weight.as_ref()
    }
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }
    /// The counters summed over every call so far.
    pub fn counters(&self) -> TelemetrySnapshot {
        self.telemetry.snapshot()
    }
}

impl Module for Norm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let got = *x.dims().last().ok_or(OpsError::Scalar)?;
        if got != self.n {
            return Err(OpsError::WidthMismatch { expected: self.n, got }.into());
        }
        norm(x, &self.spec, self.accum, self.weight.as_ref(), self.bias.as_ref(), Some(&self.telemetry))
    }
}

/// A named module: a `Norm` whose kind is fixed by the constructor, with `Norm`'s builders.
macro_rules! named_norm {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $name(Norm);

        impl $name {
            pub fn with_weight(self, weight: &Tensor) -> Self {
                Self(self.0.with_weight(weight))
            }
            pub fn with_bias(self, bias: &Tensor) -> Self {
                Self(self.0.with_bias(bias))
            }
            pub fn with_centred(self, centred: bool) -> Self {
                Self(self.0.with_centred(centred))
            }
            pub fn with_constant(self, constant: ConstMode) -> Self {
                Self(self.0.with_constant(constant))
            }
            pub fn with_accum(self, accum: Accum) -> Self {
                Self(self.0.with_accum(accum))
            }
            pub fn with_telemetry(self, telemetry: Arc<Telemetry>) -> Self {
                Self(self.0.with_telemetry(telemetry))
            }
            /// The underlying generic module.
            pub fn into_inner(self) -> Norm {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = Norm;
            fn deref(&self) -> &Norm {
                &self.0
            }
        }

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                self.0.forward(x)
            }
        }

        impl From<$name> for Norm {
            fn from(m: $name) -> Norm {
                m.0
            }
        }
    };
}

named_norm!(
    /// RMSNorm: `y = x / sqrt(mean(x^2) + eps) * w`.
    ///
    /// Unlike `candle_nn::RmsNorm`, whose fused path stops gradients, gradients flow to the
    /// input and to the weight:
    /// ```
    /// use candle_core::{Device, Module, Tensor, Var};
    /// use normlab::ops::RmsNorm;
    ///
    /// let w = Var::ones(4, candle_core::DType::F32, &Device::Cpu)?;
    /// let x = Var::new(&[[1f32, 2., 3., 4.]], &Device::Cpu)?;
    /// let norm = RmsNorm::new(4, 1e-6).with_weight(&w);
    /// let y = norm.forward(&x)?;
    /// let grads = y.sum_all()?.backward()?;
    /// assert!(grads.get(&x).is_some() && grads.get(&w).is_some());
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    RmsNorm
);
named_norm!(
    /// LayerNorm: `y = (x - mean) / sqrt(var + eps) * w + b` (biased variance, two-pass).
    /// ```
    /// use candle_core::{Device, Module, Tensor};
    /// use normlab::ops::LayerNorm;
    ///
    /// let x = Tensor::new(&[[1f32, 2., 3., 4.], [2., 2., 2., 6.]], &Device::Cpu)?;
    /// let y = LayerNorm::new(4, 1e-5).forward(&x)?;
    /// let mean = y.mean_keepdim(1)?.abs()?.max_all()?.to_scalar::<f32>()?;
    /// assert!(mean < 1e-6);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    LayerNorm
);
named_norm!(
    /// Unit L2 (nGPT's `Norm`): `y = x / max(‖x‖_2, eps) * w`.
    /// ```
    /// use candle_core::{Device, Module, Tensor};
    /// use normlab::ops::UnitNorm;
    ///
    /// let x = Tensor::new(&[[3f32, 4.]], &Device::Cpu)?;
    /// let y = UnitNorm::new(2, 1e-12).forward(&x)?;
    /// assert_eq!(y.to_vec2::<f32>()?, vec![vec![0.6, 0.8]]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    UnitNorm
);
named_norm!(
    /// L1 ("Norm matters"): `y = (x - mu) / (C_L1 * mean|x - mu| + eps) * w + b`, centred by
    /// default, `C_L1 = sqrt(pi/2)`.
    /// ```
    /// use candle_core::{DType, Device, Module, Tensor};
    /// use normlab::norms::Accum;
    /// use normlab::ops::L1Norm;
    ///
    /// // Pure f16 accumulation, to study overflow; the module counts what went wrong.
    /// let x = Tensor::new(&[[1f32, -2., 3., -4.]], &Device::Cpu)?.to_dtype(DType::F16)?;
    /// let norm = L1Norm::new(4, 1e-5).with_accum(Accum::PureF16);
    /// let _y = norm.forward(&x)?;
    /// assert!(norm.counters().is_clean());
    /// assert_eq!(norm.counters().forward_calls, 1);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    L1Norm
);
named_norm!(
    /// L-infinity: `y = (x - mu) / (C_inf(n) * max|x - mu| + eps) * w + b`, centred by default.
    /// ```
    /// use candle_core::{Device, Module, Tensor};
    /// use normlab::norms::ConstMode;
    /// use normlab::ops::LInfNorm;
    ///
    /// let x = Tensor::new(&[[1f32, -2., 4.]], &Device::Cpu)?;
    /// let y = LInfNorm::new(3, 0.0).with_centred(false).with_constant(ConstMode::One).forward(&x)?;
    /// assert_eq!(y.to_vec2::<f32>()?, vec![vec![0.25, -0.5, 1.0]]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    LInfNorm
);
named_norm!(
    /// Top-k: `y = (x - mu) / (C_topk(n, k) * mean of the k largest |x - mu| + eps) * w + b`,
    /// centred by default.
    /// ```
    /// use candle_core::{Device, Module, Tensor};
    /// use normlab::norms::ConstMode;
    /// use normlab::ops::TopKNorm;
    ///
    /// let x = Tensor::new(&[[1f32, -2., 4., 0.]], &Device::Cpu)?;
    /// // mean of the 2 largest |x| = 3.
    /// let y = TopKNorm::new(4, 2, 0.0).with_centred(false).with_constant(ConstMode::One).forward(&x)?;
    /// assert_eq!(y.to_vec2::<f32>()?, vec![vec![1. / 3., -2. / 3., 4. / 3., 0.]]);
    /// # Ok::<(), candle_core::Error>(())
    /// ```
    TopKNorm
);

impl RmsNorm {
    pub fn new(n: usize, eps: f64) -> Self {
        Self(Norm::new(NormSpec::rms(eps), n))
    }
}
impl LayerNorm {
    pub fn new(n: usize, eps: f64) -> Self {
        Self(Norm::new(NormSpec::layer(eps), n))
    }
}
impl UnitNorm {
    pub fn new(n: usize, eps: f64) -> Self {
        Self(Norm::new(NormSpec::unit_l2(eps), n))
    }
}
impl L1Norm {
    pub fn new(n: usize, eps: f64) -> Self {
        Self(Norm::new(NormSpec::l1(eps), n))
    }
}
impl LInfNorm {
    pub fn new(n: usize, eps: f64) -> Self {
        Self(Norm::new(NormSpec::linf(eps), n))
    }
}
impl TopKNorm {
    /// Top-k over `n` features, the mean of the `k` largest `|x - mu|` as statistic.
    pub fn new(n: usize, k: usize, eps: f64) -> Self {
        Self(Norm::new(NormSpec::topk(k, eps), n))
    }
}
