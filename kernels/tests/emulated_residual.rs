//! The fused residual-update kernels (src/cuda/residual.cu) on the SIMT emulator against the
//! f64 reference `normlab_norms::residual` (f64 storage, inputs widened exactly, `a` the same
//! fp32 values widened): nGPT and anGPT, fp16 and bf16, forward and backward, per-dimension and
//! scalar `a`, warp (d <= 1024) and block kernels, odd widths and tails, misaligned rows (vector
//! head path), non-congruent buffers (scalar path), in place, more rows than the persistent grid,
//! edge rows (zero, tiny, huge, a > 1 with huge h, NaN/Inf), fwd/rev/random thread orders.
//!
//! Bounds (u = 2^-24, the fp32 unit roundoff; all slacks are absolute allowances beyond which
//! at most 1 ulp of the output type is allowed, computed from f64 intermediates of a textbook
//! evaluation in the test):
//! - forward y: 1 ulp beyond `2^-19 s_r (|(1 - a) h| + |a B|)` (nGPT; r = (1 - a) h + a B is
//!   formed in fp32, which can cancel, and B carries the fp32 error of ||b||) and
//!   `2^-20 (|c_h h| + |c_b b|)` (anGPT);
//! - backward dh, db: 1 ulp beyond the fp32 error of dr = s_r (g - y (y . g)) propagated
//!   (`slack_dr = 2^-16 s_r (max|g| + sum|y g|) + |y . g| slack_y`, then `|1 - a| slack_dr` for dh
//!   and `s_b (|a| slack_dr + |B| (sum |B a| slack_dr + 2^-18 sum|B dB|) + 2^-18 |B . dB| |B|)` for db)
//!   plus `2^-16 max|output of the row|`; anGPT dh, db: 1 ulp (no slack);
//! - da (fp32): `|got - want| <= 2^-22 |want| + sum over rows of (slack of the term + 2^-17 |term|)`,
//!   the slack of an nGPT term `dr (B - h)` being `slack_dr |B - h| + 2^-18 |dr| (|B| + |h|)`.

use crate::common;

use common::{max_ulp_err, Rng, H};
use half::{bf16, f16};
use normlab_kernels::cpu::update::{self as upd};
use normlab_kernels::cpu::{EmuOptions, Order};
use normlab_kernels::list;
use normlab_kernels::plan::Device;
use normlab_kernels::residual::{Update, UpdateStats};
use normlab_kernels::KernelError;
use normlab_norms::residual::{angpt_backward, angpt_coefs, angpt_forward, ngpt_backward, ngpt_forward, NgptRowStats};

const EPS: f64 = 1e-12;

fn opts(order: Order, blocks: u32) -> EmuOptions {
    EmuOptions { order, device: Device::emulator(blocks), ..Default::default() }
}

/// The coefficients: per dimension in [lo, hi], or one value.
#[derive(Clone, Copy, Debug)]
enum Coef {
    Range(f32, f32),
    Scalar(f32),
}

fn gen_a(rng: &mut Rng, d: usize, c: Coef) -> Vec<f32> {
    match c {
        Coef::Range(lo, hi) => (0..d).map(|_| lo + (hi - lo) * rng.uniform() as f32).collect(),
        Coef::Scalar(v) => vec![v],
    }
}

fn coef(a: &[f64], j: usize) -> f64 {
    if a.len() == 1 {
        a[0]
    } else {
        a[j]
    }
}

#[derive(Clone, Copy, Debug)]
struct Case {
    rows: usize,
    d: usize,
    /// Standard deviations of h (times 1/sqrt(d): unit rows at 1) and of b.
    hs: f64,
    bs: f64,
    coef: Coef,
    /// Element offsets of h, b, y inside their buffers (misalignment, congruence).
    off: [usize; 3],
    in_place: bool,
}

fn case(rows: usize, d: usize, coef: Coef) -> Case {
    Case { rows, d, hs: 1.0, bs: 2.0, coef, off: [0, 0, 0], in_place: false }
}

struct Data<T> {
    h: Vec<T>,
    b: Vec<T>,
    g: Vec<T>,
    a: Vec<f32>,
}

fn data<T: H>(c: &Case, seed: u64) -> Data<T> {
    let mut rng = Rng(seed | 1);
    let n = c.rows * c.d;
    let hs = c.hs / (c.d as f64).sqrt();
    let h = (0..n).map(|_| T::from64(hs * rng.normal())).collect();
    let b = (0..n).map(|_| T::from64(c.bs * rng.normal())).collect();
    let g = (0..n).map(|_| T::from64(rng.normal())).collect();
    let a = gen_a(&mut rng, c.d, c.coef);
    Data { h, b, g, a }
}

fn w64<T: H>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to64()).collect()
}

/// Run the forward kernel (with the case's offsets / in place); returns y and the statistics.
fn kernel_forward<T: H>(u: Update, c: &Case, x: &Data<T>, o: &EmuOptions) -> (Vec<T>, Vec<UpdateStats>) {
    let n = c.rows * c.d;
    let mut st = vec![UpdateStats::default(); c.rows];
    let mut bb = vec![T::from64(0.0); n + c.off[1]];
    bb[c.off[1]..].copy_from_slice(&x.b);
    if c.in_place {
        let mut hb = vec![T::from64(0.0); n + c.off[0]];
        hb[c.off[0]..].copy_from_slice(&x.h);
        upd::forward_in_place(u, &mut hb[c.off[0]..], &bb[c.off[1]..], &x.a, c.d, EPS, Some(&mut st), o).unwrap();
        return (hb[c.off[0]..].to_vec(), st);
    }
    let mut hb = vec![T::from64(0.0); n + c.off[0]];
    hb[c.off[0]..].copy_from_slice(&x.h);
    let mut yb = vec![T::from64(0.0); n + c.off[2]];
    upd::forward(u, &hb[c.off[0]..], &bb[c.off[1]..], &x.a, c.d, EPS, &mut yb[c.off[2]..], Some(&mut st), o).unwrap();
    (yb[c.off[2]..].to_vec(), st)
}

/// f64 intermediates of one nGPT row set (textbook, for the error allowances).
struct NgptParts {
    bn: Vec<f64>,
    y: Vec<f64>,
    sb: Vec<f64>,
    sr: Vec<f64>,
}

fn ngpt_parts(h: &[f64], b: &[f64], a: &[f64], d: usize) -> NgptParts {
    let (mut bn, mut y, mut sb, mut sr) = (vec![0.0; h.len()], vec![0.0; h.len()], vec![], vec![]);
    for (i, (hr, br)) in h.chunks(d).zip(b.chunks(d)).enumerate() {
        let s_b = 1.0 / br.iter().map(|v| v * v).sum::<f64>().sqrt().max(EPS);
        let r: Vec<f64> = (0..d).map(|j| hr[j] + coef(a, j) * (br[j] * s_b - hr[j])).collect();
        let s_r = 1.0 / r.iter().map(|v| v * v).sum::<f64>().sqrt().max(EPS);
        for j in 0..d {
            bn[i * d + j] = br[j] * s_b;
            y[i * d + j] = r[j] * s_r;
        }
        sb.push(s_b);
        sr.push(s_r);
    }
    NgptParts { bn, y, sb, sr }
}

/// The forward allowance of element i.
fn fwd_slack(u: Update, h: &[f64], b: &[f64], a: &[f64], d: usize, p: Option<&NgptParts>) -> Vec<f64> {
    (0..h.len())
        .map(|i| {
            let aj = coef(a, i % d);
            match u {
                Update::Ngpt => {
                    let p = p.unwrap();
                    2f64.powi(-19) * p.sr[i / d] * (((1.0 - aj) * h[i]).abs() + (aj * p.bn[i]).abs())
                }
                Update::Angpt => {
                    let (ch, cb, _) = angpt_coefs(aj);
                    2f64.powi(-20) * ((ch * h[i]).abs() + (cb * b[i]).abs())
                }
            }
        })
        .collect()
}

/// Forward of one case against the reference; returns the worst error in ulps beyond the slack
/// and without it (for the report: how much the allowance is used).
fn check_forward<T: H>(u: Update, c: &Case, o: &EmuOptions, seed: u64) -> (f64, f64) {
    let x = data::<T>(c, seed);
    let (y, st) = kernel_forward(u, c, &x, o);
    let (h, b) = (w64(&x.h), w64(&x.b));
    let a: Vec<f64> = x.a.iter().map(|&v| v as f64).collect();
    let mut want = vec![0.0; h.len()];
    let mut rst = vec![NgptRowStats::default(); c.rows];
    match u {
        Update::Ngpt => ngpt_forward(&h, &b, &a, c.d, EPS, &mut want, Some(&mut rst)).unwrap(),
        Update::Angpt => angpt_forward(&h, &b, &a, c.d, &mut want).unwrap(),
    };
    if u == Update::Ngpt {
        for (r, (k, s)) in st.iter().zip(&rst).enumerate() {
            for (kd, rd, kc, rc, what) in [
                (k.b_denominator(), s.b.denominator(), k.b_clamped(), s.b.clamped, "b"),
                (k.r_denominator(), s.r.denominator(), k.r_clamped(), s.r.clamped, "r"),
            ] {
                if rd.is_nan() {
                    assert!(kd.is_nan(), "{c:?} row {r}: reference {what} stats NaN, kernel {k:?}");
                } else {
                    assert!((kd - rd).abs() <= 1e-5 * rd.abs(), "{c:?} row {r}: max(||{what}||, eps) = {kd} vs reference {rd} ({k:?})");
                    assert_eq!(kc, rc, "{c:?} row {r}: {what} clamp flag");
                }
            }
        }
    }
    let parts = (u == Update::Ngpt).then(|| ngpt_parts(&h, &b, &a, c.d));
    let slack = fwd_slack(u, &h, &b, &a, c.d, parts.as_ref());
    let (err, at) = max_ulp_err(&y, &want, &|i| slack[i]);
    assert!(
        err <= 1.0,
        "{u:?} {:?} {c:?}: {err} ulp at {at} (row {}, col {}): got {:?}, want {}, h {}, b {}",
        T::DT,
        at / c.d,
        at % c.d,
        y[at],
        want[at],
        h[at],
        b[at]
    );
    (err, max_ulp_err(&y, &want, &|_| 0.0).0)
}

fn shapes() -> Vec<(usize, usize)> {
    vec![(1, 1), (3, 7), (2, 8), (5, 33), (13, 64), (4, 100), (6, 128), (3, 256), (2, 1000), (5, 1024), (3, 1025), (2, 1500), (2, 2048), (1, 4096), (2, 4099)]
}

fn run_forward<T: H>(u: Update) {
    let (mut worst, mut raw) = (0.0f64, 0.0f64);
    for (si, &(rows, d)) in shapes().iter().enumerate() {
        for (ci, co) in [Coef::Range(0.0, 0.6), Coef::Scalar(0.3), Coef::Range(0.5, 1.5)].into_iter().enumerate() {
            let orders: &[Order] = if si % 3 == 0 { &[Order::Fwd, Order::Rev, Order::Random(5)] } else { &[Order::Fwd] };
            for (oi, &order) in orders.iter().enumerate() {
                let (e, e0) = check_forward::<T>(u, &case(rows, d, co), &opts(order, 3), 100 + si as u64 * 31 + ci as u64 * 7 + oi as u64);
                worst = worst.max(e);
                raw = raw.max(e0);
            }
        }
    }
    eprintln!("{u:?} {:?} forward: worst {worst:.3} ulp beyond slack, {raw:.3} ulp without it", T::DT);
}

#[test]
fn ngpt_forward_f16() {
    run_forward::<f16>(Update::Ngpt);
}
#[test]
fn ngpt_forward_bf16() {
    run_forward::<bf16>(Update::Ngpt);
}
#[test]
fn angpt_forward_f16() {
    run_forward::<f16>(Update::Angpt);
}
#[test]
fn angpt_forward_bf16() {
    run_forward::<bf16>(Update::Angpt);
}

/// Misaligned rows (head path), non-congruent buffers (scalar path), in place, widths not
/// multiples of 8 (scalar path), more rows than the persistent grid (grid-stride loops).
#[test]
fn layouts_in_place_and_grid_stride() {
    for u in Update::ALL {
        for &(rows, d) in &[(7, 64), (3, 1032), (5, 40), (2, 2052), (40, 16), (9, 1100)] {
            for off in [[0, 0, 0], [3, 3, 3], [1, 1, 1], [0, 0, 5], [2, 4, 2]] {
                for in_place in [false, true] {
                    let c = Case { off, in_place, ..case(rows, d, Coef::Range(0.05, 0.5)) };
                    check_forward::<f16>(u, &c, &opts(Order::Fwd, 2), 7 + rows as u64);
                    check_forward::<bf16>(u, &c, &opts(Order::Rev, 2), 9 + d as u64);
                }
            }
        }
    }
}

// ---------------------------------------------------------------- backward

/// Backward allowances and reference for one case; checks dh, db, da. Returns the worst ulps.
fn check_backward<T: H>(u: Update, c: &Case, o: &EmuOptions, seed: u64) -> f64 {
    let x = data::<T>(c, seed);
    let n = c.rows * c.d;
    let d = c.d;
    let (_, st) = kernel_forward(u, &Case { in_place: false, off: [0, 0, 0], ..*c }, &x, o);
    let (mut dh, mut db) = (vec![T::from64(0.0); n], vec![T::from64(0.0); n]);
    let mut da = vec![0f32; x.a.len()];
    upd::backward(u, &x.h, &x.b, &x.a, &x.g, d, &st, &mut dh, &mut db, Some(&mut da), o).unwrap();
    let (h, b, g) = (w64(&x.h), w64(&x.b), w64(&x.g));
    let a: Vec<f64> = x.a.iter().map(|&v| v as f64).collect();
    let (mut rdh, mut rdb, mut rda) = (vec![0.0; n], vec![0.0; n], vec![0.0; a.len()]);
    match u {
        Update::Ngpt => ngpt_backward(&h, &b, &a, d, EPS, &g, &mut rdh, &mut rdb, Some(&mut rda)).unwrap(),
        Update::Angpt => angpt_backward(&h, &b, &a, d, &g, &mut rdh, &mut rdb, Some(&mut rda)).unwrap(),
    };
    // Allowances.
    let (mut s_dh, mut s_db) = (vec![0.0; n], vec![0.0; n]);
    let mut s_da = vec![0.0; a.len()];
    let ai = |j: usize| if a.len() == 1 { 0 } else { j };
    match u {
        Update::Ngpt => {
            let p = ngpt_parts(&h, &b, &a, d);
            let sy = fwd_slack(u, &h, &b, &a, d, Some(&p));
            for r in 0..c.rows {
                let rg = r * d..(r + 1) * d;
                let (sr, sb) = (p.sr[r], p.sb[r]);
                let gmax = g[rg.clone()].iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let dot1: f64 = rg.clone().map(|i| p.y[i] * g[i]).sum();
                let sum_yg: f64 = rg.clone().map(|i| (p.y[i] * g[i]).abs()).sum();
                let dr: Vec<f64> = rg.clone().map(|i| sr * (g[i] - p.y[i] * dot1)).collect();
                let s_dr: Vec<f64> = rg.clone().map(|i| 2f64.powi(-16) * sr * (gmax + sum_yg) + dot1.abs() * sy[i]).collect();
                let db_terms: Vec<f64> = (0..d).map(|j| p.bn[r * d + j] * coef(&a, j) * dr[j]).collect();
                let dot2: f64 = db_terms.iter().sum();
                let sum_bdb: f64 = db_terms.iter().map(|v| v.abs()).sum();
                let sum_bas: f64 = (0..d).map(|j| (p.bn[r * d + j] * coef(&a, j)).abs() * s_dr[j]).sum();
                let dhmax = rg.clone().fold(0.0f64, |m, i| m.max(rdh[i].abs()));
                let dbmax = rg.clone().fold(0.0f64, |m, i| m.max(rdb[i].abs()));
                for j in 0..d {
                    let i = r * d + j;
                    let aj = coef(&a, j);
                    let bj = p.bn[i];
                    s_dh[i] = (1.0 - aj).abs() * s_dr[j] + 2f64.powi(-16) * dhmax;
                    s_db[i] = sb * (aj.abs() * s_dr[j] + bj.abs() * (sum_bas + 2f64.powi(-18) * sum_bdb) + 2f64.powi(-18) * dot2.abs() * bj.abs())
                        + 2f64.powi(-16) * dbmax;
                    let term = dr[j] * (bj - h[i]);
                    // B - h is formed in fp32 from B (relative error ~2^-19: ||b|| in fp32) and h.
                    s_da[ai(j)] += s_dr[j] * (bj - h[i]).abs() + 2f64.powi(-18) * dr[j].abs() * (bj.abs() + h[i].abs()) + 2f64.powi(-17) * term.abs();
                }
            }
        }
        Update::Angpt => {
            for i in 0..n {
                let (ch, cb, nu) = angpt_coefs(coef(&a, i % d));
                let term = g[i] * nu * nu * (ch * b[i] - cb * h[i]);
                s_da[ai(i % d)] += 2f64.powi(-20) * (g[i] * nu * nu).abs() * ((ch * b[i]).abs() + (cb * h[i]).abs()) + 2f64.powi(-17) * term.abs();
            }
        }
    }
    let what = format!("{u:?} {:?} {c:?}", T::DT);
    let (e_dh, at) = max_ulp_err(&dh, &rdh, &|i| s_dh[i]);
    assert!(e_dh <= 1.0, "{what}: dh {e_dh} ulp at {at}: got {:?}, want {}, slack {:e}", dh[at], rdh[at], s_dh[at]);
    let (e_db, at) = max_ulp_err(&db, &rdb, &|i| s_db[i]);
    assert!(e_db <= 1.0, "{what}: db {e_db} ulp at {at}: got {:?}, want {}, slack {:e}", db[at], rdb[at], s_db[at]);
    for j in 0..a.len() {
        let (got, want) = (da[j] as f64, rda[j]);
        let tol = 2f64.powi(-22) * want.abs() + s_da[j];
        assert!((got - want).abs() <= tol, "{what}: da[{j}] = {got:e}, reference {want:e}, |diff| {:e} > {tol:e}", (got - want).abs());
    }
    e_dh.max(e_db)
}

fn run_backward<T: H>(u: Update) {
    let mut worst = 0.0f64;
    for (si, &(rows, d)) in shapes().iter().enumerate() {
        for (ci, co) in [Coef::Range(0.0, 0.6), Coef::Scalar(0.3), Coef::Range(0.5, 1.5)].into_iter().enumerate() {
            let order = [Order::Fwd, Order::Rev, Order::Random(3)][(si + ci) % 3];
            worst = worst.max(check_backward::<T>(u, &case(rows, d, co), &opts(order, 3), 500 + si as u64 * 13 + ci as u64));
        }
    }
    eprintln!("{u:?} {:?} backward: worst dh/db {worst:.3} ulp beyond slack", T::DT);
}

#[test]
fn ngpt_backward_f16() {
    run_backward::<f16>(Update::Ngpt);
}
#[test]
fn ngpt_backward_bf16() {
    run_backward::<bf16>(Update::Ngpt);
}
#[test]
fn angpt_backward_f16() {
    run_backward::<f16>(Update::Angpt);
}
#[test]
fn angpt_backward_bf16() {
    run_backward::<bf16>(Update::Angpt);
}

/// da (and dh, db, y) bitwise identical across thread orders and the reversed block order, for
/// a grid smaller than the rows (several rows per group and per block).
#[test]
fn results_do_not_depend_on_thread_order() {
    for u in Update::ALL {
        for &(rows, d, co) in &[(29, 72, Coef::Range(0.0, 0.5)), (11, 1100, Coef::Range(0.1, 0.9)), (17, 40, Coef::Scalar(0.2)), (5, 2048, Coef::Scalar(0.7))] {
            let c = case(rows, d, co);
            let x = data::<bf16>(&c, 77 + d as u64);
            type Outs = (Vec<bf16>, Vec<bf16>, Vec<bf16>, Vec<u32>);
            let mut first: Option<Outs> = None;
            for (order, rev) in [(Order::Fwd, false), (Order::Rev, false), (Order::Random(1), false), (Order::Random(99), true), (Order::Fwd, true)] {
                let o = EmuOptions { reverse_blocks: rev, ..opts(order, 3) };
                let (y, st) = kernel_forward(u, &c, &x, &o);
                let (mut dh, mut db) = (vec![bf16::ZERO; rows * d], vec![bf16::ZERO; rows * d]);
                let mut da = vec![0f32; x.a.len()];
                upd::backward(u, &x.h, &x.b, &x.a, &x.g, d, &st, &mut dh, &mut db, Some(&mut da), &o).unwrap();
                let bits: Vec<u32> = da.iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some((y, dh, db, bits)),
                    Some((y0, dh0, db0, b0)) => {
                        assert!(&y == y0 && &dh == dh0 && &db == db0, "{u:?} {c:?}: outputs differ in order {order:?} rev {rev}");
                        assert_eq!(&bits, b0, "{u:?} {c:?}: da bits differ in order {order:?} rev {rev}");
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------- edge rows

/// One row set built by hand, checked against the reference (forward and backward).
fn edge<T: H>(u: Update, d: usize, h: Vec<f64>, b: Vec<f64>, a: Vec<f32>, what: &str) {
    let rows = h.len() / d;
    let x = Data::<T> {
        h: h.iter().map(|&v| T::from64(v)).collect(),
        b: b.iter().map(|&v| T::from64(v)).collect(),
        g: (0..h.len()).map(|i| T::from64(((i * 7) % 5) as f64 - 2.0)).collect(),
        a,
    };
    let c = Case { rows, d, hs: 0.0, bs: 0.0, coef: Coef::Scalar(0.0), off: [0, 0, 0], in_place: false };
    for order in [Order::Fwd, Order::Rev] {
        let o = opts(order, 2);
        let (y, st) = kernel_forward(u, &c, &x, &o);
        let (h64, b64) = (w64(&x.h), w64(&x.b));
        let a64: Vec<f64> = x.a.iter().map(|&v| v as f64).collect();
        let mut want = vec![0.0; h64.len()];
        match u {
            Update::Ngpt => ngpt_forward(&h64, &b64, &a64, d, EPS, &mut want, None).unwrap(),
            Update::Angpt => angpt_forward(&h64, &b64, &a64, d, &mut want).unwrap(),
        };
        let finite = h64.iter().chain(&b64).all(|v| v.is_finite());
        let parts = (u == Update::Ngpt).then(|| ngpt_parts(&h64, &b64, &a64, d));
        let slack: Vec<f64> = fwd_slack(u, &h64, &b64, &a64, d, parts.as_ref()).into_iter().map(|s| if s.is_finite() { s } else { 0.0 }).collect();
        let (err, at) = max_ulp_err(&y, &want, &|i| slack[i]);
        assert!(err <= 1.0, "{u:?} {:?} {what}: forward {err} ulp at {at}: got {:?}, want {}", T::DT, y[at], want[at]);
        // Backward: finite where the reference is, NaN where it is NaN.
        let (mut dh, mut db) = (vec![T::from64(0.0); h64.len()], vec![T::from64(0.0); h64.len()]);
        let mut da = vec![0f32; x.a.len()];
        upd::backward(u, &x.h, &x.b, &x.a, &x.g, d, &st, &mut dh, &mut db, Some(&mut da), &o).unwrap();
        let (mut rdh, mut rdb, mut rda) = (vec![0.0; h64.len()], vec![0.0; h64.len()], vec![0.0; a64.len()]);
        let g64 = w64(&x.g);
        match u {
            Update::Ngpt => ngpt_backward(&h64, &b64, &a64, d, EPS, &g64, &mut rdh, &mut rdb, Some(&mut rda)).unwrap(),
            Update::Angpt => angpt_backward(&h64, &b64, &a64, d, &g64, &mut rdh, &mut rdb, Some(&mut rda)).unwrap(),
        };
        for (name, got, want) in [("dh", &dh, &rdh), ("db", &db, &rdb)] {
            for i in 0..got.len() {
                let (gv, wv) = (got[i].to64(), want[i]);
                assert_eq!(gv.is_nan(), wv.is_nan(), "{u:?} {:?} {what}: {name}[{i}] = {gv}, reference {wv}", T::DT);
                if finite && wv.is_finite() && wv.abs() <= T::DT.max_finite() {
                    let scale = want.iter().filter(|v| v.is_finite()).fold(0.0f64, |m, v| m.max(v.abs()));
                    assert!((gv - wv).abs() <= 2f64.powi(-6) * scale + T::DT.ulp(wv), "{u:?} {:?} {what}: {name}[{i}] = {gv}, reference {wv}", T::DT);
                }
            }
        }
        for j in 0..da.len() {
            assert_eq!((da[j] as f64).is_nan(), rda[j].is_nan(), "{u:?} {what}: da[{j}] = {}, reference {}", da[j], rda[j]);
        }
    }
}

fn row(d: usize, f: impl Fn(usize) -> f64) -> Vec<f64> {
    (0..d).map(f).collect()
}

fn edge_rows<T: H>(tiny: f64, huge: f64) {
    for u in Update::ALL {
        for d in [5, 64, 1030] {
            let unit = |s: f64| row(d, move |j| s * (((j * 37 + 11) % 17) as f64 - 8.0) / (8.0 * (d as f64).sqrt()));
            let av = |v: f32| vec![v; d];
            let z = vec![0.0; d];
            edge::<T>(u, d, z.clone(), z.clone(), av(0.3), "h = b = 0");
            edge::<T>(u, d, unit(1.0), z.clone(), av(0.3), "b = 0 (clamped Norm(b) = 0)");
            edge::<T>(u, d, unit(1.0), unit(tiny), av(0.3), "tiny b (rescued norm)");
            edge::<T>(u, d, unit(1.0), unit(huge), av(0.3), "huge b");
            edge::<T>(u, d, unit(tiny), unit(tiny), av(0.5), "tiny h and b");
            edge::<T>(u, d, unit(1.0), unit(3.0), av(0.0), "a = 0");
            edge::<T>(u, d, unit(1.0), unit(3.0), av(1.0), "a = 1");
            edge::<T>(u, d, unit(huge), unit(1.0), av(3.0), "huge h, a = 3");
            edge::<T>(u, d, unit(huge), unit(-huge), av(0.5), "huge h and -b");
            // |(1 - a) h| = 3 x the largest finite value: beyond fp32 for bf16 (r is pre-scaled).
            edge::<T>(u, d, unit(T::DT.max_finite() * (d as f64).sqrt()), unit(1.0), av(4.0), "h at the type's limit, a = 4");
            let mut hn = unit(1.0);
            hn[d / 2] = f64::NAN;
            edge::<T>(u, d, [hn, unit(1.0)].concat(), [unit(2.0), unit(2.0)].concat(), av(0.2), "NaN in h (row 0)");
            let mut bi = unit(2.0);
            bi[d - 1] = f64::INFINITY;
            edge::<T>(u, d, [unit(1.0), unit(1.0)].concat(), [unit(2.0), bi].concat(), av(0.2), "Inf in b (row 1)");
        }
    }
}

#[test]
fn edge_rows_f16() {
    // f16: subnormals near 6e-8, the largest finite 65504.
    edge_rows::<f16>(1e-6, 6e4);
}

#[test]
fn edge_rows_bf16() {
    // bf16: squares of 1e-39 underflow fp32 and of 1e38 overflow it (rescue); h near 1e38 with
    // a = 3 takes the pre-scale of r (|(1 - a) h| >= 2^100), h at 3.4e38 with a = 4 needs it.
    edge_rows::<bf16>(1e-39, 1e38);
}

/// nGPT: a non-finite a makes every row NaN (the reference's r is NaN in every row); anGPT
/// propagates it to that column only.
#[test]
fn non_finite_a() {
    let (rows, d) = (3, 16);
    let c = case(rows, d, Coef::Range(0.1, 0.3));
    let mut x = data::<f16>(&c, 3);
    x.a[5] = f32::NAN;
    let (y, _) = kernel_forward(Update::Ngpt, &c, &x, &opts(Order::Fwd, 2));
    assert!(y.iter().all(|v| v.to_f64().is_nan()));
    let (y, _) = kernel_forward(Update::Angpt, &c, &x, &opts(Order::Fwd, 2));
    for (i, v) in y.iter().enumerate() {
        assert_eq!(v.to_f64().is_nan(), i % d == 5, "element {i}: {v:?}");
    }
}

// ---------------------------------------------------------------- list and errors

#[test]
fn launcher_list_matches_the_kernel_list() {
    assert_eq!(upd::kernel_names(), list::update_names());
    assert_eq!(list::update_names().len(), 17);
}

#[test]
fn typed_errors() {
    let o = opts(Order::Fwd, 2);
    let h = vec![f16::ZERO; 12];
    let mut y = vec![f16::ZERO; 12];
    let e = upd::forward(Update::Ngpt, &h, &h, &[0.1; 3], 4, EPS, &mut y, None, &o).unwrap_err();
    assert!(e.to_string().contains("expected length 4, got 3"), "{e}");
    let e = upd::forward(Update::Ngpt, &h, &h, &[0.1], 5, EPS, &mut y, None, &o).unwrap_err();
    assert!(e.to_string().contains("d = 5"), "{e}");
    let e = upd::forward(Update::Ngpt, &h, &h[..8], &[0.1], 4, EPS, &mut y, None, &o).unwrap_err();
    assert!(e.to_string().contains("got 8"), "{e}");
    let e = upd::forward(Update::Ngpt, &h, &h, &[0.1], 4, f64::NAN, &mut y, None, &o).unwrap_err();
    assert!(matches!(e, KernelError::Norm(_)), "{e}");
    let mut st = vec![UpdateStats::default(); 2];
    let e = upd::forward(Update::Ngpt, &h, &h, &[0.1], 4, EPS, &mut y, Some(&mut st), &o).unwrap_err();
    assert!(e.to_string().contains("stats"), "{e}");
    let (mut dh, mut db) = (y.clone(), y.clone());
    let e = upd::backward(Update::Ngpt, &h, &h, &[0.1], &h, 4, &st, &mut dh, &mut db, None, &o).unwrap_err();
    assert!(e.to_string().contains("stats") && e.to_string().contains("got 2"), "{e}");
    let mut da = vec![0f32; 2];
    let e = upd::backward(Update::Angpt, &h, &h, &[0.1], &h, 4, &[], &mut dh, &mut db, Some(&mut da), &o).unwrap_err();
    assert!(e.to_string().contains("da"), "{e}");
    // Zero rows: nothing launched, da finalized to zero.
    let mut da = vec![1f32; 4];
    upd::backward::<f16>(Update::Angpt, &[], &[], &[0.1; 4], &[], 4, &[], &mut [], &mut [], Some(&mut da), &o).unwrap();
    assert_eq!(da, vec![0.0; 4]);
}
