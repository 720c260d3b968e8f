//! Gradients as the optimizer sees them: collected in parameter order, brought to f32,
//! unscaled, measured by their global L2 norm, clipped.
//!
//! Global norm: `||g|| = sqrt(sum_p sum_i g_{p,i}^2)`, each parameter's sum of squares taken
//! in f64 (no overflow for any f32 gradient) and the parameters added in their fixed order, so
//! the norm is deterministic. Clipping follows `torch.nn.utils.clip_grad_norm_`: with
//! `c = max_norm / (||g|| + 1e-6)`, every gradient is multiplied by `min(c, 1)`.

use candle_core::{backprop::GradStore, DType, Result, Tensor};

use crate::model::ParamStore;

/// Added to the norm in the clipping factor (as torch does) so a zero gradient is harmless.
pub const CLIP_EPS: f64 = 1e-6;

/// The gradient of every parameter of `store`, in its order, as f32 multiplied by `unscale`
/// (1 / loss scale; exactly 1 when not scaling). A parameter the loss does not reach gets zeros.
pub fn collect_f32(store: &ParamStore, grads: &GradStore, unscale: f64) -> Result<Vec<Tensor>> {
    store
        .iter()
        .map(|p| {
            let g = match grads.get(p.var.as_tensor()) {
                Some(g) => g.to_dtype(DType::F32)?,
                None => Tensor::zeros(p.var.shape(), DType::F32, p.var.device())?,
            };
            if unscale == 1.0 {
                Ok(g)
            } else {
                g.affine(unscale, 0.0)
            }
        })
        .collect()
}

/// Global L2 norm of `grads` (f64 per-tensor sums, added in order). Non-finite if any element is.
pub fn global_norm(grads: &[Tensor]) -> Result<f64> {
    let mut sum = 0.0f64;
    for g in grads {
        sum += g.to_dtype(DType::F64)?.sqr()?.sum_all()?.to_scalar::<f64>()?;
    }
    Ok(sum.sqrt())
}

/// The factor clipping applies for a gradient of global norm `norm` (1 when `max_norm` is 0 = off).
pub fn clip_factor(norm: f64, max_norm: f64) -> f64 {
    if max_norm <= 0.0 {
        return 1.0;
    }
    (max_norm / (norm + CLIP_EPS)).min(1.0)
}

/// Multiply every gradient by `factor` (nothing to do when it is 1).
pub fn scale(grads: Vec<Tensor>, factor: f64) -> Result<Vec<Tensor>> {
    if factor == 1.0 {
        return Ok(grads);
    }
    grads.into_iter().map(|g| g.affine(factor, 0.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn global_norm_and_clipping() {
        let d = Device::Cpu;
        let a = Tensor::new(&[3f32, 0.0], &d).unwrap();
        let b = Tensor::new(&[[4f32]], &d).unwrap();
        let n = global_norm(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(n, 5.0);
        let f = clip_factor(n, 1.0);
        assert!((f - 1.0 / (5.0 + CLIP_EPS)).abs() < 1e-15);
        let clipped = scale(vec![a, b], f).unwrap();
        let after = global_norm(&clipped).unwrap();
        assert!((after - 1.0).abs() < 1e-6, "{after}");
        // Under the threshold, or clipping off: untouched.
        assert_eq!(clip_factor(0.5, 1.0), 1.0);
        assert_eq!(clip_factor(50.0, 0.0), 1.0);
        // A non-finite element makes the norm non-finite.
        let bad = Tensor::new(&[1f32, f32::INFINITY], &d).unwrap();
        assert!(!global_norm(&[bad]).unwrap().is_finite());
    }
}
