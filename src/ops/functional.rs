//! The norm as a function on tensors: argument checks, then the forward op with autograd, or
//! its composed candle form where the op cannot run ([`norm_on`], `crate::ops::path`).

use std::sync::Arc;

use candle_core::{Result, Tensor};
use normlab_norms::{Accum, NormSpec};

use crate::ops::composed;
use crate::ops::error::OpsError;
use crate::ops::forward::{Affine, NormFwd};
use crate::ops::path::{norm_route, NormRoute, OpPath};
use crate::ops::storage::check_supported;
use crate::ops::telemetry::Telemetry;

/// Normalize `x` over its last dimension: `y = norm(x) * weight + bias` as `spec` defines it,
/// statistics in `accum` (use [`Accum::F32`] unless studying half accumulation), with
/// gradients for x, weight and bias through candle's autograd. `weight` and `bias` are 1-D of
/// the last dimension's size and x's dtype. The call's counters are added into `telemetry`.
///
/// x may have any rank >= 1 and any layout (strided inputs are read through their layout).
///
/// This is [`norm_on`] with [`OpPath::Auto`]: the op on the CPU (and on CUDA for f16/bf16 with
/// the f32 accumulator), the composed candle form on other devices and dtypes.
///
/// ```
/// use candle_core::{Device, Tensor, Var};
/// use normlab::norms::{Accum, NormSpec};
/// use normlab::ops::norm;
///
/// let x = Var::new(&[[1f32, -2., 3., -4.], [0.5, 0., -0.5, 1.]], &Device::Cpu)?;
/// let y = norm(&x, &NormSpec::linf(1e-6), Accum::F32, None, None, None)?;
/// let grads = (y.sqr()?.sum_all()?).backward()?;
/// assert_eq!(grads.get(&x).unwrap().dims(), &[2, 4]);
/// # Ok::<(), candle_core::Error>(())
/// ```
pub fn norm(
    x: &Tensor,
    spec: &NormSpec,
    accum: Accum,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    telemetry: Option<&Arc<Telemetry>>,
) -> Result<Tensor> {
    norm_on(OpPath::Auto, x, spec, accum, weight, bias, telemetry)
}

/// [`norm`] on the implementation `path` chooses for x's device and dtype
/// ([`crate::ops::path::norm_route`]): the norm custom op, or the composed candle form
/// (`crate::ops::composed`: statistics in the accumulator's dtype, candle's autograd, no
/// telemetry counters). A combination no implementation runs (a pure f16/bf16 accumulator off
/// the CPU op, a too wide composed top-k on CUDA) is [`OpsError::DeviceUnsupported`].
pub fn norm_on(
    path: OpPath,
    x: &Tensor,
    spec: &NormSpec,
    accum: Accum,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    telemetry: Option<&Arc<Telemetry>>,
) -> Result<Tensor> {
    let n = *x.dims().last().ok_or(OpsError::Scalar)?;
    check_supported(x.dtype())?;
    spec.validate(n).map_err(OpsError::from)?;
    spec.scale_constant(n).map_err(OpsError::from)?;
    for (what, p) in [("weight", weight), ("bias", bias)] {
        if let Some(p) = p {
            if p.dtype() != x.dtype() {
                return Err(OpsError::DTypeMismatch { what, expected: x.dtype(), got: p.dtype() }.into());
            }
            if p.dims() != [n] {
                return Err(OpsError::ShapeMismatch { what, expected: n, got: p.dims().to_vec() }.into());
            }
        }
    }
    if let NormRoute::Composed { work } = norm_route(path, &x.device().location(), x.dtype(), accum, spec, n)? {
        return composed::norm(x, spec, work, weight, bias);
    }
    let save = x.track_op() || weight.is_some_and(|t| t.track_op()) || bias.is_some_and(|t| t.track_op());
    let op = NormFwd::new(*spec, accum, Affine::new(weight.is_some(), bias.is_some()), save, telemetry.cloned());
    match (weight, bias) {
        (None, None) => x.apply_op1(op),
        (Some(p), None) | (None, Some(p)) => x.apply_op2(p, op),
        (Some(w), Some(b)) => x.apply_op3(w, b, op),
    }
}
