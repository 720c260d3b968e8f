//! The candle-nn baselines: `candle_nn::ops::rms_norm` and `candle_nn::ops::layer_norm` on the
//! CPU, over the same data as a [`Workload`] (copied once into candle tensors).

use candle_core::{Device, Tensor, WithDType};
use normlab_norms::Element;

use crate::bench::cases::BENCH_EPS;
use crate::bench::error::BenchError;
use crate::bench::workload::Workload;

/// Which candle-nn op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CandleOp {
    #[serde(rename = "candle_nn::ops::rms_norm")]
    RmsNorm,
    #[serde(rename = "candle_nn::ops::layer_norm")]
    LayerNorm,
}

impl CandleOp {
    pub const ALL: [CandleOp; 2] = [CandleOp::RmsNorm, CandleOp::LayerNorm];
    pub fn name(self) -> &'static str {
        match self {
            CandleOp::RmsNorm => "candle rms_norm",
            CandleOp::LayerNorm => "candle layer_norm",
        }
    }
}

pub struct CandleBaseline {
    x: Tensor,
    alpha: Tensor,
    beta: Tensor,
}

impl CandleBaseline {
    pub fn new<T: Element + WithDType>(w: &Workload<T>) -> Result<Self, BenchError> {
        let cpu = Device::Cpu;
        Ok(CandleBaseline {
            x: Tensor::from_slice(&w.x, (w.shape.rows, w.shape.n), &cpu)?,
            alpha: Tensor::from_slice(&w.weight, w.shape.n, &cpu)?,
            beta: Tensor::from_slice(&w.bias, w.shape.n, &cpu)?,
        })
    }

    /// Run the op once; the output (allocated by candle) is returned so the caller decides
    /// when it is dropped.
    pub fn run(&self, op: CandleOp) -> Result<Tensor, BenchError> {
        let eps = BENCH_EPS as f32;
        Ok(match op {
            CandleOp::RmsNorm => candle_nn::ops::rms_norm(&self.x, &self.alpha, eps)?,
            CandleOp::LayerNorm => candle_nn::ops::layer_norm(&self.x, &self.alpha, &self.beta, eps)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::cases::{kind_spec, Shape};

    /// Same data, same op: candle's RMSNorm and ours agree to f32 rounding, so the baseline
    /// measures the same computation.
    #[test]
    fn candle_and_ours_compute_the_same_norms() {
        let mut w = Workload::<f32>::new(Shape { rows: 37, n: 100 });
        let base = CandleBaseline::new(&w).unwrap();
        for (op, kind) in [(CandleOp::RmsNorm, "rms"), (CandleOp::LayerNorm, "layer")] {
            let theirs: Vec<f32> = base.run(op).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            w.forward(&kind_spec(kind, 8).unwrap()).unwrap();
            let worst = theirs.iter().zip(&w.y).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-4, "{kind}: max abs diff {worst}");
        }
    }
}
