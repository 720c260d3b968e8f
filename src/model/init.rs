//! Seeded initialisation of the parameters.
//!
//! candle's CPU device cannot be seeded, so the values are drawn here from the repository's own
//! generator (`normlab_norms::nu::rng::StreamRng`, xoshiro256++ seeded through SplitMix64) in
//! f64, shaped (normal, unit rows, unit columns), rounded once into the storage dtype and
//! registered in a [`ParamStore`] in creation order. The same seed and configuration therefore
//! give bit-identical parameters on every machine and thread count.

use candle_core::{DType, Device, Tensor, Var};
use normlab_norms::nu::rng::StreamRng;
use normlab_norms::nu::sample::normal;

use crate::model::params::{ParamGroup, ParamStore};
use crate::model::ModelError;

/// Draws the initial values and registers the parameters.
pub(crate) struct Builder<'a> {
    pub store: ParamStore,
    rng: StreamRng,
    storage: DType,
    device: &'a Device,
}

impl<'a> Builder<'a> {
    pub fn new(seed: u64, storage: DType, device: &'a Device) -> Result<Self, ModelError> {
        if !matches!(storage, DType::F64 | DType::F32 | DType::F16 | DType::BF16) {
            return Err(ModelError::StorageDType(storage));
        }
        // Stream 0x6d6f64656c ("model"): distinct from the data pipeline's streams.
        Ok(Builder { store: ParamStore::new(), rng: StreamRng::new(seed, 0x6d_6f_64_65_6c /* "model" */), storage, device })
    }

    /// `n` draws of N(0, std^2).
    pub fn normal(&mut self, n: usize, std: f64) -> Vec<f64> {
        (0..n).map(|_| std * normal(&mut self.rng)).collect()
    }

    /// An `(out, inp)` Gaussian matrix with every row scaled to unit L2 norm (a uniformly random
    /// direction per row).
    pub fn unit_rows(&mut self, out: usize, inp: usize) -> Vec<f64> {
        let mut w = self.normal(out * inp, 1.0);
        for row in w.chunks_mut(inp) {
            let n = row.iter().map(|x| x * x).sum::<f64>().sqrt();
            row.iter_mut().for_each(|x| *x /= n);
        }
        w
    }

    /// An `(out, inp)` Gaussian matrix with every column scaled to unit L2 norm.
    pub fn unit_cols(&mut self, out: usize, inp: usize) -> Vec<f64> {
        let mut w = self.normal(out * inp, 1.0);
        for j in 0..inp {
            let n = (0..out).map(|i| w[i * inp + j].powi(2)).sum::<f64>().sqrt();
            (0..out).for_each(|i| w[i * inp + j] /= n);
        }
        w
    }

    /// Register a parameter with the given f64 values, rounded once into the storage dtype.
    pub fn add(&mut self, name: impl Into<String>, shape: &[usize], values: Vec<f64>, group: ParamGroup) -> Result<Var, ModelError> {
        let t = Tensor::from_vec(values, shape, self.device)?.to_dtype(self.storage)?;
        let var = Var::from_tensor(&t)?;
        self.store.push(name, var.clone(), group)?;
        Ok(var)
    }

    /// A vector filled with one value.
    pub fn constant(&mut self, name: impl Into<String>, n: usize, value: f64, group: ParamGroup) -> Result<Var, ModelError> {
        self.add(name, &[n], vec![value; n], group)
    }
}
