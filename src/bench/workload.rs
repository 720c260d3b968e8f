//! One benchmark workload: the input, upstream gradient, affine parameters and preallocated
//! outputs of a `[rows, n]` shape in one storage type, with the calls that are timed.
//!
//! Every kind gets a weight (as in a transformer's norm layer); LayerNorm also gets a bias,
//! as candle-nn's `layer_norm` does. The backward also produces the weight (and bias)
//! gradient, as training needs. Accumulation is in f32 ([`Accum::F32`]), the default.

use normlab_norms::{row, Accum, Counters, Element, NormKind, NormSpec, RowStats};

use crate::bench::cases::Shape;
use crate::bench::data::gaussian;
use crate::bench::error::BenchError;

pub struct Workload<T> {
    pub shape: Shape,
    /// Input, N(0, 1).
    pub x: Vec<T>,
    /// Upstream gradient, N(0, 1), independent of x.
    pub dy: Vec<T>,
    /// Weight, N(1, 0.1^2).
    pub weight: Vec<T>,
    /// Bias, N(0, 0.1^2) (LayerNorm only).
    pub bias: Vec<T>,
    pub y: Vec<T>,
    pub dx: Vec<T>,
    pub dweight: Vec<T>,
    pub dbias: Vec<T>,
    stats: Vec<RowStats>,
    /// The spec whose forward filled `stats` (the backward needs that forward's statistics).
    stats_for: Option<NormSpec>,
}

impl<T: Element> Workload<T> {
    /// Deterministic inputs: the same values for every run of the same shape and dtype.
    pub fn new(shape: Shape) -> Self {
        let len = shape.elems();
        Workload {
            shape,
            x: gaussian(len, 0x5EED_0001, 0.0, 1.0),
            dy: gaussian(len, 0x5EED_0002, 0.0, 1.0),
            weight: gaussian(shape.n, 0x5EED_0003, 1.0, 0.1),
            bias: gaussian(shape.n, 0x5EED_0004, 0.0, 0.1),
            y: vec![T::default(); len],
            dx: vec![T::default(); len],
            dweight: vec![T::default(); shape.n],
            dbias: vec![T::default(); shape.n],
            stats: vec![RowStats::default(); shape.rows],
            stats_for: None,
        }
    }

    fn has_bias(spec: &NormSpec) -> bool {
        spec.kind == NormKind::Layer
    }

    /// `y = norm(x) * weight (+ bias)`, saving the per-row statistics for [`Self::backward`].
    pub fn forward(&mut self, spec: &NormSpec) -> Result<Counters, BenchError> {
        let bias = Self::has_bias(spec).then_some(&self.bias[..]);
        let c = row::forward(spec, Accum::F32, &self.x, self.shape.n, Some(&self.weight), bias, &mut self.y, Some(&mut self.stats))?;
        self.stats_for = Some(*spec);
        Ok(c)
    }

    /// `dx`, `dweight` (and `dbias`) from `dy`. Needs a forward of the same spec first.
    pub fn backward(&mut self, spec: &NormSpec) -> Result<Counters, BenchError> {
        if self.stats_for != Some(*spec) {
            return Err(BenchError::invalid(
                "backward call",
                format!("{spec:?}"),
                "run the forward of this spec first: the backward needs its saved statistics",
            ));
        }
        let dbias = Self::has_bias(spec).then_some(&mut self.dbias[..]);
        let c = row::backward(
            spec,
            Accum::F32,
            &self.x,
            &self.dy,
            self.shape.n,
            &self.stats,
            Some(&self.weight),
            &mut self.dx,
            Some(&mut self.dweight),
            dbias,
        )?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::cases::kind_spec;

    #[test]
    fn forward_then_backward_is_clean_and_backward_alone_is_refused() {
        let mut w = Workload::<f32>::new(Shape { rows: 3, n: 40 });
        let spec = kind_spec("layer", 8).unwrap();
        assert!(w.backward(&spec).is_err());
        assert!(w.forward(&spec).unwrap().is_clean());
        // Each output row has mean ~ mean(bias) weighted; check it is not a no-op instead.
        assert_ne!(w.y, w.x);
        assert!(w.backward(&spec).unwrap().is_clean());
        assert!(w.dx.iter().any(|&v| v != 0.0));
        assert!(w.dbias.iter().all(|v| v.is_finite()));
        let other = kind_spec("topk", 8).unwrap();
        assert!(w.backward(&other).is_err());
    }
}
