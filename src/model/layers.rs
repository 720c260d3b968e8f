//! The small layers the three models share, on plain candle tensors with autograd.
//!
//! - [`linear`]: bias-free `y = x W^T` with PyTorch's `(out, in)` weight layout.
//! - [`embedding`]: row lookup `h_t = W_e[id_t]`.
//! - [`swiglu`]: `u * SiLU(z)` on the two halves of one `(.., 2r)` projection (NVIDIA/ngpt's
//!   `c_fc` layout: u first, the gate z second).
//! - [`Scaled`]: the nGPT reparametrisation `effective = stored * (init / scale)`.
//! - [`lerp_factor`]: anGPT's elementwise residual factor `nu(a) = ((1 - a)^2 + a^2)^{-1/2}`.
//! - [`mean_norm`]: mean over tokens of `||x||_2` (probes).

use candle_core::{DType, Result, Tensor, Var, D};

/// A parameter at use: cast to the compute dtype (differentiable, a no-op when equal).
pub(crate) fn cast(v: &Var, dtype: DType) -> Result<Tensor> {
    v.as_tensor().to_dtype(dtype)
}

/// `y = x W^T` over the last dimension of `x`; `w` is `(out, in)` (PyTorch `nn.Linear` layout).
/// The leading dimensions are flattened into one matrix product.
pub(crate) fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dims = x.dims();
    let inp = *dims.last().ok_or_else(|| candle_core::Error::msg("linear: scalar input"))?;
    let (out, w_in) = w.dims2()?;
    if w_in != inp {
        candle_core::bail!("linear: input width {inp} does not match the weight's (out, in) = ({out}, {w_in})");
    }
    let rows = x.elem_count() / inp.max(1);
    let y = x.reshape((rows, inp))?.matmul(&w.t()?)?;
    let mut od = dims.to_vec();
    *od.last_mut().expect("rank >= 1") = out;
    y.reshape(od)
}

/// `h[b, t] = w[ids[b, t]]`: `ids` `[B, T]` u32, `w` `(V, d)`, result `[B, T, d]`.
pub(crate) fn embedding(ids: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (b, t) = ids.dims2()?;
    let d = w.dim(1)?;
    w.index_select(&ids.flatten_all()?, 0)?.reshape((b, t, d))
}

/// SwiGLU on one projection `uz` `(.., 2r)`: `u * SiLU(z)`, `u = uz[.., :r]`, `z = uz[.., r:]`
/// (a fused op, or its composed form where `ops` says so: `fused::swiglu`).
pub(crate) fn swiglu(uz: &Tensor, ops: crate::ops::OpPath) -> Result<Tensor> {
    crate::model::fused::swiglu(uz, ops)
}

/// A reparametrised vector: the optimizer sees `stored` (initialised to `scale`), the model
/// uses `stored * (init / scale)`, so the effective value starts at `init` while its effective
/// learning rate is multiplied by `init / scale` (nGPT section 2.5, NVIDIA/ngpt `*_init_value`
/// / `*_init_scaling`).
#[derive(Clone, Debug)]
pub(crate) struct Scaled {
    pub var: Var,
    pub factor: f64,
}

impl Scaled {
    pub fn new(var: Var, init: f64, scale: f64) -> Self {
        Scaled { var, factor: init / scale }
    }
    /// The effective value in `dtype` (the multiplication runs in the storage dtype, then one
    /// cast).
    pub fn effective(&self, dtype: DType) -> Result<Tensor> {
        self.var.as_tensor().affine(self.factor, 0.0)?.to_dtype(dtype)
    }
}

/// anGPT's residual factor, elementwise: `nu_i = ((1 - a_i)^2 + a_i^2)^{-1/2}`, the inverse
/// square root of `E||(1 - a) h + a x||^2` per coordinate for independent unit `h`, `x`
/// (algorithms.md 2.4; `normlab_norms::nu::closed::lerp_mean_sq` is the scalar form).
pub(crate) fn lerp_factor(a: &Tensor) -> Result<Tensor> {
    let one_minus = a.affine(-1.0, 1.0)?;
    (one_minus.sqr()? + a.sqr()?)?.sqrt()?.recip()
}

/// Mean over all leading positions of the L2 norm over the last dimension, in f64, detached.
pub(crate) fn mean_norm(x: &Tensor) -> Result<f64> {
    x.detach().to_dtype(DType::F64)?.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.mean_all()?.to_scalar::<f64>()
}

/// Logits as the models return them: f32, except on the f64 reference path (compute f64),
/// which keeps f64 so that gradient checks by finite differences are not limited by an f32
/// rounding of the output.
pub(crate) fn logits_out(x: Tensor) -> Result<Tensor> {
    if x.dtype() == DType::F64 {
        Ok(x)
    } else {
        x.to_dtype(DType::F32)
    }
}
