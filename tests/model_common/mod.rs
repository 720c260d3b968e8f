//! Helpers shared by the model tests.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use normlab::model::{Arch, ModelConfig, NormChoice};

pub fn cfg(arch: Arch, norm: NormChoice, d: usize, heads: usize, layers: usize, vocab: usize) -> ModelConfig {
    ModelConfig { arch, norm, d_model: d, n_heads: heads, n_layers: layers, vocab, ..ModelConfig::default() }
}

/// The norm choices each architecture accepts (top-k with k = 2).
pub fn norms_for(arch: Arch) -> Vec<NormChoice> {
    let mut v = vec![NormChoice::L2, NormChoice::Rms, NormChoice::L1, NormChoice::LInf, NormChoice::TopK { k: 2 }];
    if arch != Arch::GptPlus {
        v.push(NormChoice::Nu);
    }
    v
}

/// Deterministic token ids `[b, t]` below `vocab`.
pub fn tokens(b: usize, t: usize, vocab: usize, salt: u32) -> Tensor {
    let ids: Vec<u32> = (0..(b * t) as u32).map(|i| (i.wrapping_mul(2654435761).wrapping_add(salt * 97) >> 7) % vocab as u32).collect();
    Tensor::from_vec(ids, (b, t), &Device::Cpu).unwrap()
}

/// A tensor's values as f64 (exact widening).
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().flatten_all().unwrap().to_vec1::<f64>().unwrap()
}

/// L2 norms of the rows (`cols == false`) or columns of a 2-D tensor, in f64.
pub fn line_norms(t: &Tensor, cols: bool) -> Vec<f64> {
    let (r, c) = t.dims2().unwrap();
    let v = values(t);
    if cols {
        (0..c).map(|j| (0..r).map(|i| v[i * c + j].powi(2)).sum::<f64>().sqrt()).collect()
    } else {
        v.chunks(c).map(|row| row.iter().map(|x| x * x).sum::<f64>().sqrt()).collect()
    }
}
