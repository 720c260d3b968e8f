//! The composable pipeline `g(x)` whose output norm the Monte Carlo engine estimates.
//!
//! A pipeline is a small directed acyclic graph built in topological order: every node is
//! evaluated once per sample and may feed several consumers (so `u` and `z` of SwiGLU can both
//! read the same input). Sources are independent uniform unit vectors (`sphere`) and the
//! attention block (which draws its own `s` positions).
//!
//! Which expectation is estimated: **over the input and over the weights.** Every `linear` node
//! draws a fresh matrix with independent random rows for every sample (rows uniform on the sphere
//! of radius `rho`, or uniform in the ball of radius `rho`), as the anGPT derivation assumes
//! ("random directions") and as the reference numbers of algorithms.md 2.5 were computed. The
//! expectation for one fixed trained matrix is a different quantity and is not estimated here.

use crate::error::{NormError, Result};
use crate::nu::activation::Activation;

/// Index of a node in its pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeId(pub(crate) usize);

impl NodeId {
    pub fn index(self) -> usize {
        self.0
    }
}

/// The distribution of the rows of a random linear map `R^d -> R^r`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RowDist {
    /// Every row has norm exactly `radius`, direction uniform (unit rows: `radius = 1`).
    Sphere { radius: f64 },
    /// Every row is uniform in the ball of radius `radius` (a norm-bounded row, `||w_i|| <= radius`).
    Ball { radius: f64 },
}

impl RowDist {
    /// Unit-norm rows.
    pub const UNIT: RowDist = RowDist::Sphere { radius: 1.0 };

    /// `E||w_i||^2` for rows of `R^d`: `radius^2` on the sphere, `radius^2 d/(d+2)` in the ball.
    pub fn mean_sq_row_norm(&self, d: usize) -> f64 {
        match *self {
            RowDist::Sphere { radius } => radius * radius,
            RowDist::Ball { radius } => radius * radius * d as f64 / (d as f64 + 2.0),
        }
    }

    fn radius(&self) -> f64 {
        match *self {
            RowDist::Sphere { radius } | RowDist::Ball { radius } => radius,
        }
    }
}

/// The interpolation weight of the residual LERP `(1 - alpha) h + alpha x`.
#[derive(Debug, Clone, PartialEq)]
pub enum Alpha {
    Scalar(f64),
    /// One alpha per dimension (nGPT's eigen learning rates).
    PerDim(Vec<f64>),
}

/// Dense causal softmax attention at the last of `positions` positions.
///
/// Per sample: `positions` independent uniform unit residual vectors `x_j in R^{d_model}`; per
/// head, random unit-row `W_q, W_k, W_v in R^{d_head x d_model}`; `q = qkv_scale W_q x_last`,
/// `k_j = qkv_scale W_k x_j`, `v_j = qkv_scale W_v x_j`; optionally `q, k_j <- q/||q||, k_j/||k_j||`
/// (anGPT keeps the exact norm on q and k); `a = softmax_j(score_scale q . k_j)`;
/// head output `sum_j a_j v_j`. The node's value is the concatenation over heads.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionSpec {
    pub d_model: usize,
    pub heads: usize,
    pub d_head: usize,
    pub positions: usize,
    pub score_scale: f64,
    pub qkv_scale: f64,
    pub normalize_qk: bool,
}

/// One node of the graph.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// A uniform unit vector of `R^d`, independent of every other source.
    Sphere { d: usize },
    /// `W x` with a fresh random `W in R^{r x d}` per sample.
    Linear { input: NodeId, r: usize, rows: RowDist },
    /// `(1 - alpha) a + alpha b`.
    Lerp { a: NodeId, b: NodeId, alpha: Alpha },
    /// Elementwise activation.
    Act { input: NodeId, f: Activation },
    /// Elementwise product.
    Mul { a: NodeId, b: NodeId },
    /// Multiplication by a constant.
    Scale { input: NodeId, c: f64 },
    /// Concatenation.
    Concat { parts: Vec<NodeId> },
    /// Dense softmax attention (a source: it draws its own positions).
    Attention(AttentionSpec),
}

/// A pipeline under construction or ready to run. Nodes are only appended, so ids are
/// topologically ordered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pipeline {
    pub(crate) nodes: Vec<Node>,
    pub(crate) dims: Vec<usize>,
}

fn positive(what: &'static str, value: usize) -> Result<()> {
    if value == 0 {
        Err(NormError::Empty { what, value })
    } else {
        Ok(())
    }
}

fn finite(what: &'static str, value: f64) -> Result<()> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(NormError::OutOfRange { what, range: "finite values", value })
    }
}

fn unit_interval(what: &'static str, value: f64) -> Result<()> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(NormError::OutOfRange { what, range: "[0, 1]", value })
    }
}

impl Pipeline {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Output dimension of a node.
    pub fn dim(&self, id: NodeId) -> usize {
        self.dims[id.0]
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    fn check(&self, id: NodeId) -> Result<usize> {
        self.dims
            .get(id.0)
            .copied()
            .ok_or_else(|| NormError::Shape(format!("node id {} does not exist (pipeline has {} nodes)", id.0, self.nodes.len())))
    }

    fn push(&mut self, node: Node, dim: usize) -> NodeId {
        self.nodes.push(node);
        self.dims.push(dim);
        NodeId(self.nodes.len() - 1)
    }

    fn same_dim(&self, a: NodeId, b: NodeId, op: &str) -> Result<usize> {
        let (da, db) = (self.check(a)?, self.check(b)?);
        if da != db {
            return Err(NormError::Shape(format!("{op}: operand dimensions differ ({da} vs {db})")));
        }
        Ok(da)
    }

    /// A uniform unit vector of `R^d`.
    pub fn sphere(&mut self, d: usize) -> Result<NodeId> {
        positive("sphere dimension d", d)?;
        Ok(self.push(Node::Sphere { d }, d))
    }

    /// A random linear map to `R^r` with rows drawn from `rows`.
    pub fn linear(&mut self, input: NodeId, r: usize, rows: RowDist) -> Result<NodeId> {
        self.check(input)?;
        positive("linear output dimension r", r)?;
        let radius = rows.radius();
        if !(radius.is_finite() && radius > 0.0) {
            return Err(NormError::OutOfRange { what: "row norm bound", range: "finite values > 0", value: radius });
        }
        Ok(self.push(Node::Linear { input, r, rows }, r))
    }

    /// The residual LERP `(1 - alpha) h + alpha x`.
    pub fn lerp(&mut self, h: NodeId, x: NodeId, alpha: Alpha) -> Result<NodeId> {
        let d = self.same_dim(h, x, "lerp")?;
        match &alpha {
            Alpha::Scalar(a) => unit_interval("lerp alpha", *a)?,
            Alpha::PerDim(v) => {
                if v.len() != d {
                    return Err(NormError::Length { what: "per-dimension alpha", expected: d, got: v.len() });
                }
                for &a in v {
                    unit_interval("lerp alpha", a)?;
                }
            }
        }
        Ok(self.push(Node::Lerp { a: h, b: x, alpha }, d))
    }

    /// Elementwise activation.
    pub fn activation(&mut self, input: NodeId, f: Activation) -> Result<NodeId> {
        let d = self.check(input)?;
        Ok(self.push(Node::Act { input, f }, d))
    }

    /// Elementwise product.
    pub fn mul(&mut self, a: NodeId, b: NodeId) -> Result<NodeId> {
        let d = self.same_dim(a, b, "mul")?;
        Ok(self.push(Node::Mul { a, b }, d))
    }

    /// Multiplication by a finite constant.
    pub fn scale(&mut self, input: NodeId, c: f64) -> Result<NodeId> {
        let d = self.check(input)?;
        finite("scale constant", c)?;
        Ok(self.push(Node::Scale { input, c }, d))
    }

    /// Concatenation of the parts, in order.
    pub fn concat(&mut self, parts: &[NodeId]) -> Result<NodeId> {
        positive("number of concatenated parts", parts.len())?;
        let mut d = 0;
        for &p in parts {
            d += self.check(p)?;
        }
        Ok(self.push(Node::Concat { parts: parts.to_vec() }, d))
    }

    /// SwiGLU `u * SiLU(gate_scale * z)`.
    pub fn swiglu(&mut self, u: NodeId, z: NodeId, gate_scale: f64) -> Result<NodeId> {
        self.same_dim(u, z, "swiglu")?;
        let zs = self.scale(z, gate_scale)?;
        let a = self.activation(zs, Activation::Silu)?;
        self.mul(u, a)
    }

    /// Dense softmax attention (see [`AttentionSpec`]).
    pub fn attention(&mut self, spec: AttentionSpec) -> Result<NodeId> {
        positive("attention d_model", spec.d_model)?;
        positive("attention heads", spec.heads)?;
        positive("attention d_head", spec.d_head)?;
        positive("attention positions", spec.positions)?;
        finite("attention score scale", spec.score_scale)?;
        finite("attention qkv scale", spec.qkv_scale)?;
        let d = spec.heads * spec.d_head;
        Ok(self.push(Node::Attention(spec), d))
    }

    /// Checks that `output` exists (the engine calls this).
    pub fn check_output(&self, output: NodeId) -> Result<usize> {
        self.check(output)
    }
}

#[cfg(feature = "test-hooks")]
pub(crate) mod tests {
    use super::*;

    fn bad_configs_are_typed_errors() {
        let mut p = Pipeline::new();
        assert!(matches!(p.sphere(0), Err(NormError::Empty { value: 0, .. })));
        let h = p.sphere(8).unwrap();
        let x = p.sphere(8).unwrap();
        let y = p.sphere(4).unwrap();
        assert!(matches!(p.lerp(h, x, Alpha::Scalar(1.5)), Err(NormError::OutOfRange { value, .. }) if value == 1.5));
        assert!(matches!(p.lerp(h, x, Alpha::Scalar(-0.1)), Err(NormError::OutOfRange { .. })));
        assert!(matches!(p.lerp(h, x, Alpha::PerDim(vec![0.5; 3])), Err(NormError::Length { expected: 8, got: 3, .. })));
        assert!(matches!(p.mul(h, y), Err(NormError::Shape(_))));
        assert!(matches!(p.linear(h, 0, RowDist::UNIT), Err(NormError::Empty { .. })));
        assert!(matches!(p.linear(h, 3, RowDist::Ball { radius: f64::NAN }), Err(NormError::OutOfRange { .. })));
        assert!(matches!(p.scale(NodeId(99), 1.0), Err(NormError::Shape(_))));
        assert!(p.lerp(h, x, Alpha::Scalar(0.3)).is_ok());
    }

    pub(crate) const TESTS: &[crate::unit_tests::UnitTest] = crate::unit_tests::register![bad_configs_are_typed_errors];
}
