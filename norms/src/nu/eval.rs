//! One Monte Carlo sample of a pipeline: evaluates every node the output depends on, in order,
//! into per-node buffers that are reused from sample to sample.

use rand::Rng;

use crate::nu::pipeline::{Alpha, AttentionSpec, Node, NodeId, Pipeline, RowDist};
use crate::nu::sample::{ball_radius, bartlett_chis, bartlett_unit_rows, unit_vector, ChiSq, SphereHead};

/// What a run needs to know about the graph, computed once.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Nodes `0..=output` that the output depends on.
    live: Vec<bool>,
    /// Whether a node's coordinates are needed. A `linear` node only needs its input's norm
    /// (its fresh rotation-invariant matrix makes `W x` depend on `x` only through `||x||`), and a
    /// unit sphere source has norm 1, so a sphere read only by linear maps is never drawn.
    dense: Vec<bool>,
    /// Per linear node: the sampler of one coordinate of a uniform unit vector of its input dimension.
    heads: Vec<Option<SphereHead>>,
    /// Per attention node: Bartlett chi-squared samplers and the row-head sampler.
    attn: Vec<Option<AttnPlan>>,
    output: usize,
}

#[derive(Debug, Clone)]
struct AttnPlan {
    m: usize,
    chis: Vec<ChiSq>,
    head: SphereHead,
}

impl Plan {
    pub(crate) fn new(p: &Pipeline, output: NodeId) -> Plan {
        let n = output.0 + 1;
        let mut live = vec![false; n];
        let mut dense = vec![false; n];
        live[output.0] = true;
        dense[output.0] = true;
        for i in (0..n).rev() {
            if !live[i] {
                continue;
            }
            let mut mark = |j: NodeId, need: bool| {
                live[j.0] = true;
                dense[j.0] |= need;
            };
            match &p.nodes[i] {
                Node::Sphere { .. } | Node::Attention(_) => {}
                Node::Linear { input, .. } => {
                    let is_sphere = matches!(p.nodes[input.0], Node::Sphere { .. });
                    mark(*input, !is_sphere);
                }
                Node::Lerp { a, b, .. } | Node::Mul { a, b } => {
                    mark(*a, true);
                    mark(*b, true);
                }
                Node::Act { input, .. } | Node::Scale { input, .. } => mark(*input, true),
                Node::Concat { parts } => parts.iter().for_each(|&q| mark(q, true)),
            }
        }
        let heads = (0..n)
            .map(|i| match &p.nodes[i] {
                Node::Linear { input, .. } if live[i] => Some(SphereHead::new(p.dims[input.0], 1)),
                _ => None,
            })
            .collect();
        let attn = (0..n)
            .map(|i| match &p.nodes[i] {
                Node::Attention(s) if live[i] => {
                    let m = s.positions.min(s.d_model);
                    Some(AttnPlan { m, chis: bartlett_chis(s.d_model, m), head: SphereHead::new(s.d_model, m) })
                }
                _ => None,
            })
            .collect();
        Plan { live, dense, heads, attn, output: output.0 }
    }
}

/// Per-thread buffers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Workspace {
    bufs: Vec<Vec<f64>>,
    // attention scratch
    x: Vec<f64>,
    c: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    q: Vec<f64>,
    w: Vec<f64>,
}

impl Workspace {
    pub(crate) fn new(p: &Pipeline, plan: &Plan) -> Workspace {
        let bufs = (0..=plan.output).map(|i| vec![0.0; if plan.live[i] { p.dims[i] } else { 0 }]).collect();
        Workspace { bufs, ..Default::default() }
    }
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Evaluates one sample and returns `||g(x)||^2`.
pub(crate) fn sample<R: Rng + ?Sized>(p: &Pipeline, plan: &Plan, ws: &mut Workspace, rng: &mut R) -> f64 {
    for i in 0..=plan.output {
        if !plan.live[i] {
            continue;
        }
        // Take the node's buffer out so the inputs can be borrowed from the others.
        let mut out = std::mem::take(&mut ws.bufs[i]);
        match &p.nodes[i] {
            Node::Sphere { .. } => {
                if plan.dense[i] {
                    unit_vector(rng, &mut out);
                }
            }
            Node::Linear { input, rows, .. } => {
                let head = plan.heads[i].as_ref().expect("planned");
                let d_in = p.dims[input.0];
                let x_norm = match p.nodes[input.0] {
                    Node::Sphere { .. } => 1.0,
                    _ => norm(&ws.bufs[input.0]),
                };
                match *rows {
                    RowDist::Sphere { radius } => {
                        let s = radius * x_norm;
                        out.iter_mut().for_each(|o| *o = head.sample_one(rng, s));
                    }
                    RowDist::Ball { radius } => {
                        for o in out.iter_mut() {
                            let s = radius * ball_radius(rng, d_in) * x_norm;
                            *o = head.sample_one(rng, s);
                        }
                    }
                }
            }
            Node::Lerp { a, b, alpha } => {
                let (va, vb) = (&ws.bufs[a.0], &ws.bufs[b.0]);
                match alpha {
                    Alpha::Scalar(al) => {
                        for ((o, x), y) in out.iter_mut().zip(va).zip(vb) {
                            *o = (1.0 - al) * x + al * y;
                        }
                    }
                    Alpha::PerDim(al) => {
                        for (((o, x), y), al) in out.iter_mut().zip(va).zip(vb).zip(al) {
                            *o = (1.0 - al) * x + al * y;
                        }
                    }
                }
            }
            Node::Act { input, f } => {
                for (o, x) in out.iter_mut().zip(&ws.bufs[input.0]) {
                    *o = f.apply(*x);
                }
            }
            Node::Mul { a, b } => {
                for ((o, x), y) in out.iter_mut().zip(&ws.bufs[a.0]).zip(&ws.bufs[b.0]) {
                    *o = x * y;
                }
            }
            Node::Scale { input, c } => {
                for (o, x) in out.iter_mut().zip(&ws.bufs[input.0]) {
                    *o = c * x;
                }
            }
            Node::Concat { parts } => {
                let mut at = 0;
                for q in parts {
                    let src = &ws.bufs[q.0];
                    out[at..at + src.len()].copy_from_slice(src);
                    at += src.len();
                }
            }
            Node::Attention(spec) => {
                attention(spec, plan.attn[i].as_ref().expect("planned"), ws, rng, &mut out);
            }
        }
        ws.bufs[i] = out;
    }
    ws.bufs[plan.output].iter().map(|x| x * x).sum()
}

/// Rows of `W x_j` for all positions: `dst[j * d_head + i] = scale * (w_i . x_j)`, with the
/// rows' projections on the span of the positions drawn by `head` (see `sample`).
#[allow(clippy::too_many_arguments)] // scratch buffers passed separately to keep the hot loop borrow-free
fn project<R: Rng + ?Sized>(rng: &mut R, ap: &AttnPlan, x: &[f64], s: usize, d_head: usize, scale: f64, c: &mut [f64], dst: &mut [f64], only_last: bool) {
    let m = ap.m;
    for i in 0..d_head {
        ap.head.sample(rng, scale, c);
        let j0 = if only_last { s - 1 } else { 0 };
        for j in j0..s {
            let xr = &x[j * m..(j + 1) * m];
            let dot: f64 = xr.iter().zip(&c[..m]).map(|(a, b)| a * b).sum();
            dst[j * d_head + i] = dot;
        }
    }
}

fn attention<R: Rng + ?Sized>(spec: &AttentionSpec, ap: &AttnPlan, ws: &mut Workspace, rng: &mut R, out: &mut [f64]) {
    let (s, d, dh, m) = (spec.positions, spec.d_model, spec.d_head, ap.m);
    ws.x.resize(s * m, 0.0);
    ws.c.resize(m, 0.0);
    ws.k.resize(s * dh, 0.0);
    ws.v.resize(s * dh, 0.0);
    ws.q.resize(s * dh, 0.0);
    ws.w.resize(s, 0.0);
    if s <= d {
        bartlett_unit_rows(rng, d, m, &ap.chis, &mut ws.x);
    } else {
        // More positions than dimensions: explicit coordinates in R^d (m = d).
        for j in 0..s {
            unit_vector(rng, &mut ws.x[j * m..(j + 1) * m]);
        }
    }
    for h in 0..spec.heads {
        project(rng, ap, &ws.x, s, dh, spec.qkv_scale, &mut ws.c, &mut ws.q, true);
        project(rng, ap, &ws.x, s, dh, spec.qkv_scale, &mut ws.c, &mut ws.k, false);
        project(rng, ap, &ws.x, s, dh, spec.qkv_scale, &mut ws.c, &mut ws.v, false);
        let q = &mut ws.q[(s - 1) * dh..s * dh];
        if spec.normalize_qk {
            let n = norm(q);
            if n > 0.0 {
                q.iter_mut().for_each(|v| *v /= n);
            }
            for j in 0..s {
                let kr = &mut ws.k[j * dh..(j + 1) * dh];
                let n = norm(kr);
                if n > 0.0 {
                    kr.iter_mut().for_each(|v| *v /= n);
                }
            }
        }
        let mut mx = f64::NEG_INFINITY;
        for j in 0..s {
            let kr = &ws.k[j * dh..(j + 1) * dh];
            let sc = spec.score_scale * q.iter().zip(kr).map(|(a, b)| a * b).sum::<f64>();
            ws.w[j] = sc;
            mx = mx.max(sc);
        }
        let mut z = 0.0;
        for w in ws.w.iter_mut() {
            *w = (*w - mx).exp();
            z += *w;
        }
        let o = &mut out[h * dh..(h + 1) * dh];
        o.iter_mut().for_each(|v| *v = 0.0);
        for j in 0..s {
            let a = ws.w[j] / z;
            for (ov, vv) in o.iter_mut().zip(&ws.v[j * dh..(j + 1) * dh]) {
                *ov += a * vv;
            }
        }
    }
}
