//! A test-only language model for the training-loop suites: byte embedding, a unit-L2 norm
//! (through `normlab::ops::norm`, so the norms' counters reach the loop) with a learnable gain,
//! and an output head. `project()` puts every embedding row back on the unit sphere (as nGPT
//! does), so the tests can see that the loop calls it. Knobs make failures real: `input_gain`
//! multiplies the embedding before the norm (a large one overflows a pure-f16 sum of squares),
//! `poison_forward` makes the logits of one forward call NaN.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor, Var};
use normlab::model::{ForwardCtx, ForwardOut, LanguageModel, LayerProbe, ModelConfig, ParamGroup, ParamStore};
use normlab::norms::NormSpec;
use normlab::ops::{norm, Telemetry};
use normlab::train::{ExperimentConfig, Precision};

pub const VOCAB: usize = 256;

pub struct TinyModel {
    cfg: ModelConfig,
    params: ParamStore,
    telemetry: Arc<Telemetry>,
    emb: Var,
    head: Var,
    gain: Var,
    d: usize,
    pub input_gain: f64,
    /// 1-based index of the forward call whose logits become NaN.
    pub poison_forward: Option<u64>,
    calls: AtomicU64,
}

/// SplitMix64 stream, uniform in [-1, 1).
fn uniforms(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            ((z >> 11) as f64 / (1u64 << 52) as f64 - 1.0) as f32
        })
        .collect()
}

impl TinyModel {
    /// Parameters stored in `storage`, initialised from `seed`, embedding rows unit-norm.
    pub fn new(storage: DType, seed: u64, d: usize) -> Self {
        let dev = Device::Cpu;
        let var = |vals: Vec<f32>, shape: (usize, usize)| {
            Var::from_tensor(&Tensor::from_vec(vals, shape, &dev).unwrap().to_dtype(storage).unwrap()).unwrap()
        };
        let emb = var(uniforms(seed, VOCAB * d), (VOCAB, d));
        let head = var(uniforms(seed ^ 0xabcdef, VOCAB * d).into_iter().map(|x| 0.05 * x).collect(), (VOCAB, d));
        let gain = Var::from_tensor(&Tensor::ones(d, storage, &dev).unwrap()).unwrap();
        let mut params = ParamStore::new();
        params.push("emb", emb.clone(), ParamGroup::Embedding).unwrap();
        params.push("head", head.clone(), ParamGroup::Matrix).unwrap();
        params.push("gain", gain.clone(), ParamGroup::Scale).unwrap();
        let m = TinyModel {
            cfg: ModelConfig { d_model: d, n_layers: 1, ..Default::default() },
            params,
            telemetry: Telemetry::new(),
            emb,
            head,
            gain,
            d,
            input_gain: 1.0,
            poison_forward: None,
            calls: AtomicU64::new(0),
        };
        m.project().unwrap();
        m
    }

    /// For an experiment config: storage of its precision, its seed.
    pub fn for_config(cfg: &ExperimentConfig, d: usize) -> Self {
        Self::new(cfg.train.precision.storage_dtype(), cfg.train.seed, d)
    }

    /// Largest | ||row|| - 1 | over the embedding rows (0 after a projection, up to rounding).
    pub fn emb_row_norm_error(&self) -> f64 {
        let e = self.emb.as_tensor().to_dtype(DType::F64).unwrap();
        let n = e.sqr().unwrap().sum(1).unwrap().sqrt().unwrap().to_vec1::<f64>().unwrap();
        n.iter().map(|x| (x - 1.0).abs()).fold(0.0, f64::max)
    }
}

fn mean_row_norm(x: &Tensor) -> Result<f64> {
    x.to_dtype(DType::F64)?.sqr()?.sum(1)?.sqrt()?.mean_all()?.to_scalar::<f64>()
}

impl LanguageModel for TinyModel {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn params(&self) -> &ParamStore {
        &self.params
    }
    fn forward(&self, tokens: &Tensor, ctx: &ForwardCtx) -> Result<ForwardOut> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let (b, t) = tokens.dims2()?;
        let ids = tokens.flatten_all()?;
        let mut x = self.emb.as_tensor().to_dtype(ctx.compute)?.embedding(&ids)?;
        if self.input_gain != 1.0 {
            x = x.affine(self.input_gain, 0.0)?;
        }
        let gain = self.gain.as_tensor().to_dtype(ctx.compute)?;
        let h = norm(&x, &NormSpec::unit_l2(1e-6), ctx.accum, Some(&gain), None, Some(&self.telemetry))?;
        let logits = h.matmul(&self.head.as_tensor().to_dtype(ctx.compute)?.t()?)?.affine((self.d as f64).sqrt(), 0.0)?;
        let mut logits = logits.to_dtype(DType::F32)?.reshape((b, t, VOCAB))?;
        if self.poison_forward == Some(call) {
            logits = logits.affine(f64::NAN, 0.0)?;
        }
        let probes = if ctx.probes {
            vec![LayerProbe { residual_norm: mean_row_norm(&x)?, attn_out_norm: mean_row_norm(&h)?, mlp_out_norm: 0.0 }]
        } else {
            Vec::new()
        };
        Ok(ForwardOut { logits, probes })
    }
    fn project(&self) -> Result<()> {
        let dtype = self.emb.dtype();
        let e = self.emb.as_tensor().to_dtype(DType::F32)?;
        let n = e.sqr()?.sum_keepdim(1)?.sqrt()?;
        self.emb.set(&e.broadcast_div(&n)?.to_dtype(dtype)?)
    }
    fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }
}

/// A small, fast experiment config for the test model.
pub fn tiny_config(precision: Precision, steps: u64) -> ExperimentConfig {
    let mut cfg = ExperimentConfig::default();
    cfg.train.steps = steps;
    cfg.train.batch_size = 4;
    cfg.train.seq_len = 16;
    cfg.train.lr = 1e-2;
    cfg.train.eval_every = 8;
    cfg.train.eval_batches = 2;
    cfg.train.precision = precision;
    cfg.train.seed = 7;
    cfg
}

/// A fresh empty directory under the target dir's tmp area.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
