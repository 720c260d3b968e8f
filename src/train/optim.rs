//! AdamW on the `Var`s of a [`ParamStore`], in place.
//!
//! With gradient `g` (f32, unscaled, clipped), step count `t` (1 for the first update),
//! learning rate `lr` and, for [`ParamGroup::Matrix`] only, weight decay `wd`
//! (decoupled, Loshchilov & Hutter; torch.optim.AdamW's order of operations):
//!
//! ```text
//! p <- p (1 - lr wd)                               (matrices only; wd = 0 by default)
//! m <- b1 m + (1 - b1) g
//! v <- b2 v + (1 - b2) g^2
//! p <- p - (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//! ```
//!
//! Everything is computed in f32 from the stored values; `p` is rounded once into its storage
//! dtype and `m`, `v` once into the state dtype (f32, or f16/bf16 in the pure modes). The
//! papers' settings are b1 = 0.9, b2 = 0.95, eps = 1e-8 and no weight decay for nGPT/anGPT
//! (algorithms.md 1.5, 2.6).

use std::collections::{BTreeMap, HashMap};

use candle_core::{DType, Result, Tensor};

use crate::model::{ParamGroup, ParamStore};

/// Hyper-parameters of AdamW.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// AdamW's moments, one pair per parameter in the store's order.
#[derive(Clone, Debug)]
pub struct AdamW {
    cfg: AdamWConfig,
    state_dtype: DType,
    /// Updates done so far (the `t` of the bias corrections).
    t: u64,
    m: Vec<Tensor>,
    v: Vec<Tensor>,
}

impl AdamW {
    /// Zero moments of the store's shapes, stored in `state_dtype`.
    pub fn new(store: &ParamStore, cfg: AdamWConfig, state_dtype: DType) -> Result<Self> {
        let zeros = |p: &crate::model::Param| Tensor::zeros(p.var.shape(), state_dtype, p.var.device());
        let m = store.iter().map(zeros).collect::<Result<Vec<_>>>()?;
        let v = store.iter().map(zeros).collect::<Result<Vec<_>>>()?;
        Ok(AdamW { cfg, state_dtype, t: 0, m, v })
    }

    pub fn config(&self) -> &AdamWConfig {
        &self.cfg
    }

    /// Updates done so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// First moments, in the store's order.
    pub fn first_moments(&self) -> &[Tensor] {
        &self.m
    }

    /// Second moments, in the store's order.
    pub fn second_moments(&self) -> &[Tensor] {
        &self.v
    }

    /// One update of every parameter of `store` with `grads` (f32, store order) at `lr`.
    pub fn step(&mut self, store: &ParamStore, grads: &[Tensor], lr: f64) -> Result<()> {
        if grads.len() != store.len() || self.m.len() != store.len() {
            candle_core::bail!(
                "AdamW: {} gradients and {} moment pairs for {} parameters",
                grads.len(),
                self.m.len(),
                store.len()
            );
        }
        self.t += 1;
        let AdamWConfig { beta1: b1, beta2: b2, eps, weight_decay: wd } = self.cfg;
        let bc1 = 1.0 - b1.powi(self.t.min(i32::MAX as u64) as i32);
        let bc2 = 1.0 - b2.powi(self.t.min(i32::MAX as u64) as i32);
        let step_size = lr / bc1;
        let inv_sqrt_bc2 = 1.0 / bc2.sqrt();
        for (i, (p, g)) in store.iter().zip(grads).enumerate() {
            let storage = p.var.dtype();
            let mut p32 = p.var.as_tensor().to_dtype(DType::F32)?;
            if wd != 0.0 && p.group == ParamGroup::Matrix {
                p32 = p32.affine(1.0 - lr * wd, 0.0)?;
            }
            let g = g.to_dtype(DType::F32)?;
            let m = (self.m[i].to_dtype(DType::F32)?.affine(b1, 0.0)? + g.affine(1.0 - b1, 0.0)?)?;
            let v = (self.v[i].to_dtype(DType::F32)?.affine(b2, 0.0)? + g.sqr()?.affine(1.0 - b2, 0.0)?)?;
            let denom = v.sqrt()?.affine(inv_sqrt_bc2, eps)?;
            let p_new = (p32 - (m.div(&denom)?.affine(step_size, 0.0))?)?;
            p.var.set(&p_new.to_dtype(storage)?)?;
            self.m[i] = m.to_dtype(self.state_dtype)?;
            self.v[i] = v.to_dtype(self.state_dtype)?;
        }
        Ok(())
    }

    /// Variance (population, over all elements) of the first moment of each parameter group,
    /// by group name. Two passes in f64 per group.
    pub fn first_moment_variance(&self, store: &ParamStore) -> Result<BTreeMap<String, f64>> {
        let mut by_group: BTreeMap<ParamGroup, Vec<f64>> = BTreeMap::new();
        for (p, m) in store.iter().zip(&self.m) {
            let vals = m.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?;
            by_group.entry(p.group).or_default().extend(vals);
        }
        Ok(by_group
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(group, vals)| {
                let n = vals.len() as f64;
                let mean = vals.iter().sum::<f64>() / n;
                let var = vals.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
                (group.name().to_string(), var)
            })
            .collect())
    }

    /// The moments by name (`m/NAME`, `v/NAME`), for a checkpoint.
    pub fn tensors(&self, store: &ParamStore) -> HashMap<String, Tensor> {
        let mut out = HashMap::new();
        for (i, p) in store.iter().enumerate() {
            out.insert(format!("m/{}", p.name), self.m[i].clone());
            out.insert(format!("v/{}", p.name), self.v[i].clone());
        }
        out
    }

    /// Restore the moments from [`AdamW::tensors`]'s names and the step count. Every name must
    /// be present with the parameter's shape; the error names the first one that is not.
    pub fn restore(&mut self, store: &ParamStore, tensors: &HashMap<String, Tensor>, t: u64) -> std::result::Result<(), String> {
        let expect = tensors.len();
        if expect != 2 * store.len() {
            return Err(format!("{} moment tensors for {} parameters (expected {})", expect, store.len(), 2 * store.len()));
        }
        for (i, p) in store.iter().enumerate() {
            for (kind, slot) in [("m", &mut self.m[i]), ("v", &mut self.v[i])] {
                let name = format!("{kind}/{}", p.name);
                let t = tensors.get(&name).ok_or_else(|| format!("moment {name:?} is missing"))?;
                if t.dims() != p.var.dims() {
                    return Err(format!("moment {name:?} has shape {:?}, the parameter {:?}", t.dims(), p.var.dims()));
                }
                *slot = t.to_dtype(self.state_dtype).map_err(|e| format!("moment {name:?}: {e}"))?;
            }
        }
        self.t = t;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn store() -> ParamStore {
        let d = Device::Cpu;
        let mut s = ParamStore::new();
        s.push("w", Var::new(&[[0.5f32, -1.0], [2.0, 0.25]], &d).unwrap(), ParamGroup::Matrix).unwrap();
        s.push("g", Var::new(&[1.0f32, -0.5], &d).unwrap(), ParamGroup::Scale).unwrap();
        s
    }

    /// Why the pure modes keep Adam's moments in f32 by default (`OptimizerState`): stored in
    /// f16, `v = 0.05 g^2` underflows to 0 for a small gradient; when the next gradient of that
    /// weight is zero (an embedding row of a token absent from the batch) while `m` still holds
    /// the earlier one, the update is `lr * m_hat / eps` instead of a fraction of `lr`.
    #[test]
    fn f16_second_moment_underflows_and_explodes_the_update() {
        let d = Device::Cpu;
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0 };
        let mut moved = Vec::new();
        for state in [DType::F32, DType::F16] {
            let mut s = ParamStore::new();
            let w = Var::from_tensor(&Tensor::new(&[0.5f32], &d).unwrap().to_dtype(DType::F16).unwrap()).unwrap();
            s.push("w", w.clone(), ParamGroup::Matrix).unwrap();
            let mut opt = AdamW::new(&s, cfg, state).unwrap();
            opt.step(&s, &[Tensor::new(&[1e-4f32], &d).unwrap()], 1e-3).unwrap();
            let v = opt.second_moments()[0].to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap()[0];
            if state == DType::F16 {
                assert_eq!(v, 0.0, "0.05 * (1e-4)^2 = 5e-10 is below f16's smallest subnormal (6e-8)");
            } else {
                assert!((v - 0.05e-8).abs() < 1e-14, "{v}");
            }
            opt.step(&s, &[Tensor::new(&[0.0f32], &d).unwrap()], 1e-3).unwrap();
            moved.push(0.5 - w.as_tensor().to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap()[0]);
        }
        // f32 state: step 1 moves by about lr, step 2 by m_hat / sqrt(v_hat) = 0.67 lr.
        assert!(moved[0] > 1e-3 && moved[0] < 3e-3, "f32 state moved {}", moved[0]);
        // f16 state: step 2 is lr * m_hat / eps = 1e-3 * 4.7e-5 / 1e-8, about 4.7.
        assert!(moved[1] > 1.0, "f16 state: the second step divides by eps, moved {}", moved[1]);
    }

    /// Two AdamW steps against the formulas evaluated by hand in f64.
    #[test]
    fn two_steps_match_hand_computed_adamw() {
        let s = store();
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 };
        let mut opt = AdamW::new(&s, cfg, DType::F32).unwrap();
        let d = Device::Cpu;
        let g1 = [vec![0.1f64, -0.2, 0.3, 0.0], vec![1.0, -4.0]];
        let g2 = [vec![-0.05f64, 0.4, 0.3, 2.0], vec![0.5, 0.5]];
        let lr = [1e-2f64, 5e-3];
        let mut p: Vec<Vec<f64>> = vec![vec![0.5, -1.0, 2.0, 0.25], vec![1.0, -0.5]];
        let mut m = [vec![0.0; 4], vec![0.0; 2]];
        let mut v = [vec![0.0; 4], vec![0.0; 2]];
        for (t, (g, lr)) in [g1, g2].iter().zip(lr).enumerate() {
            let t = t as i32 + 1;
            let grads = vec![
                Tensor::from_vec(g[0].iter().map(|&x| x as f32).collect::<Vec<_>>(), (2, 2), &d).unwrap(),
                Tensor::from_vec(g[1].iter().map(|&x| x as f32).collect::<Vec<_>>(), 2, &d).unwrap(),
            ];
            opt.step(&s, &grads, lr).unwrap();
            for k in 0..2 {
                let wd = if k == 0 { 0.1 } else { 0.0 };
                for i in 0..p[k].len() {
                    p[k][i] *= 1.0 - lr * wd;
                    m[k][i] = 0.9 * m[k][i] + 0.1 * g[k][i];
                    v[k][i] = 0.95 * v[k][i] + 0.05 * g[k][i] * g[k][i];
                    let mh = m[k][i] / (1.0 - 0.9f64.powi(t));
                    let vh = v[k][i] / (1.0 - 0.95f64.powi(t));
                    p[k][i] -= lr * mh / (vh.sqrt() + 1e-8);
                }
            }
        }
        let got = [
            s.get("w").unwrap().var.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            s.get("g").unwrap().var.to_vec1::<f32>().unwrap(),
        ];
        for k in 0..2 {
            for (a, b) in got[k].iter().zip(&p[k]) {
                // A handful of f32 roundings on values of order 1: within 4 ulp of the f64 value.
                let ulp = f32::EPSILON as f64 * b.abs().max(1e-3);
                assert!((*a as f64 - b).abs() <= 4.0 * ulp, "param {k}: {a} vs {b}");
            }
        }
        // The first step moves every coordinate with a non-zero gradient by ~lr (sign of g).
        assert_eq!(opt.steps(), 2);
        let mv = opt.first_moment_variance(&s).unwrap();
        let m_matrix: Vec<f64> = m[0].clone();
        let mean = m_matrix.iter().sum::<f64>() / 4.0;
        let var = m_matrix.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 4.0;
        assert!((mv["matrix"] - var).abs() < 1e-8, "{} vs {var}", mv["matrix"]);
        assert!(mv.contains_key("scale") && !mv.contains_key("embedding"));
    }

    /// Pure f16: the state is stored in f16 and the parameter rounded once from the f32 update.
    #[test]
    fn pure_f16_state_and_single_rounding() {
        let d = Device::Cpu;
        let mut s = ParamStore::new();
        let p0 = [1.0f32, -0.75, 0.1];
        let var = Var::from_tensor(&Tensor::new(&p0, &d).unwrap().to_dtype(DType::F16).unwrap()).unwrap();
        s.push("p", var, ParamGroup::Scale).unwrap();
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0 };
        let mut opt = AdamW::new(&s, cfg, DType::F16).unwrap();
        let g = Tensor::new(&[0.3f32, -0.01, 2.0], &d).unwrap();
        opt.step(&s, &[g], 1e-2).unwrap();
        assert_eq!(opt.first_moments()[0].dtype(), DType::F16);
        let got = s.get("p").unwrap().var.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
        // First step: m_hat = g, v_hat = g^2, so p - lr * sign(g) (eps negligible), rounded to f16.
        for ((a, p), gs) in got.iter().zip(p0).zip([1.0f32, -1.0, 1.0]) {
            let p16 = half::f16::from_f32(p).to_f32();
            let want = half::f16::from_f32(p16 - 1e-2 * gs).to_f32();
            assert_eq!(*a, want);
        }
    }

    #[test]
    fn restore_names_the_missing_moment() {
        let s = store();
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.0 };
        let mut opt = AdamW::new(&s, cfg, DType::F32).unwrap();
        let mut t = opt.tensors(&s);
        assert!(opt.clone().restore(&s, &t, 3).is_ok());
        t.remove("v/g");
        t.insert("v/x".into(), Tensor::zeros(2, DType::F32, &Device::Cpu).unwrap());
        let e = opt.restore(&s, &t, 3).unwrap_err();
        assert!(e.contains("v/g"), "{e}");
    }
}
