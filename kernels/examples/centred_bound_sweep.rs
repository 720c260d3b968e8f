//! The measurement behind the centred term of the forward bound (`src/bounds.rs`,
//! kernels/README.md "Bounds"): the row kernels on the SIMT emulator against the f64 reference,
//! every centred kind, fp16 and bf16, with the centred allowance scaled by 0, 1/16, 1/8 and 1 (the
//! bias term always in). For each scale it prints how many cases were more than 1 ulp beyond
//! the allowance, their worst error, and the worst error of the others.
//!
//! ```text
//! cargo run --release -p normlab-kernels --example centred_bound_sweep          # n in 1..1400
//! cargo run --release -p normlab-kernels --example centred_bound_sweep -- wide  # n of 4099..12288
//! ```
//!
//! The data are those of the random-shape test in tests/emulated.rs: rows of N(0.2, 3^2),
//! weights N(1, 0.5^2), biases N(0, 0.5^2), drawn by the same generator.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{gen, max_ulp_err, ref_forward, to64, Data, Rng, H};
use half::{bf16, f16};
use normlab_kernels::bounds::{forward_slack, mean_abs};
use normlab_kernels::cpu::{self, EmuOptions, Order};
use normlab_kernels::plan::Device;
use normlab_norms::NormSpec;

/// Scales of the centred term tried (1 is the bound as used).
const SCALES: [f64; 4] = [0.0, 0.0625, 0.125, 1.0];

/// Worst error (ulps beyond the allowance) of one case at each scale, and the magnitude of the
/// reference output where it occurs.
fn case_errors<T: H>(spec: &NormSpec, rows: usize, n: usize, weight: bool, bias: bool, seed: u64) -> [(f64, f64); 4] {
    let mut rng = Rng(seed | 1);
    let data = Data::Normal { mean: 0.2, scale: 3.0 };
    let x: Vec<T> = gen(&mut rng, rows * n, data);
    let w: Option<Vec<T>> = weight.then(|| gen(&mut rng, n, Data::Normal { mean: 1.0, scale: 0.5 }));
    let b: Option<Vec<T>> = bias.then(|| gen(&mut rng, n, Data::Normal { mean: 0.0, scale: 0.5 }));
    let mut y = vec![T::from64(0.0); rows * n];
    let o = EmuOptions { order: Order::Fwd, device: Device::emulator(2), ..Default::default() };
    cpu::forward(spec, &x, n, w.as_deref(), b.as_deref(), &mut y, None, &o).expect("kernel forward");
    let (want, _) = ref_forward(spec, &x, n, w.as_deref(), b.as_deref());
    let (xh, _) = ref_forward::<T>(spec, &x, n, None, None);
    let (w64, b64) = (w.as_deref().map(to64), b.as_deref().map(to64));
    let spread: Vec<f64> = xh.chunks(n).map(|r| mean_abs(r.iter().copied(), n)).collect();
    SCALES.map(|c| {
        let slack = |i: usize| {
            let wj = w64.as_ref().map_or(1.0, |w| w[i % n]);
            forward_slack(xh[i] * wj, b64.as_ref().map(|b| b[i % n]), c * spread[i / n] * wj.abs())
        };
        let (err, at) = max_ulp_err(&y, &want, &slack);
        (err, want[at].abs())
    })
}

fn main() {
    let wide = std::env::args().nth(1).as_deref() == Some("wide");
    let specs = if wide {
        vec![NormSpec::layer(1e-5), NormSpec::l1(1e-6), NormSpec::linf(1e-6), NormSpec::topk(5, 1e-6)]
    } else {
        vec![NormSpec::layer(1e-5), NormSpec::l1(1e-6), NormSpec::linf(1e-6), NormSpec::topk(1, 1e-6), NormSpec::topk(5, 1e-6)]
    };
    let mut cases = 0usize;
    let mut fails = [0usize; 4];
    let mut worst_fail = [0f64; 4];
    let mut least_fail = [f64::INFINITY; 4];
    let mut fail_output = [0f64; 4];
    let mut worst_pass = [0f64; 4];
    for spec in &specs {
        for seed in 0..if wide { 12u64 } else { 300 } {
            let (rows, n, affine, seed_used): (usize, usize, &[(bool, bool)], u64) = if wide {
                (2, [4099, 8192, 12288][seed as usize % 3], if seed % 2 == 0 { &[(true, false)] } else { &[(false, false)] }, seed * 7919 + 5)
            } else {
                (3, 1 + (seed as usize * 613) % 1400, &[(false, false), (true, false), (true, true)], seed * 7919)
            };
            if spec.validate(n).is_err() || spec.scale_constant(n).is_err() {
                continue;
            }
            for &(weight, bias) in affine {
                for bf in [false, true] {
                    let e = if bf {
                        case_errors::<bf16>(spec, rows, n, weight, bias, seed_used)
                    } else {
                        case_errors::<f16>(spec, rows, n, weight, bias, seed_used)
                    };
                    cases += 1;
                    for (s, &(err, output)) in e.iter().enumerate() {
                        if err > 1.0 {
                            fails[s] += 1;
                            worst_fail[s] = worst_fail[s].max(err);
                            least_fail[s] = least_fail[s].min(err);
                            fail_output[s] = fail_output[s].max(output);
                        } else {
                            worst_pass[s] = worst_pass[s].max(err);
                        }
                    }
                }
            }
        }
    }
    println!("{cases} cases ({} rows)", if wide { "n of 4099, 8192, 12288" } else { "n in 1..1400" });
    for s in 0..SCALES.len() {
        println!(
            "centred term x {:<6}: {:>3} cases over 1 ulp ({:.2}..{:.2}, at outputs up to {:.1e}), the others within {:.5} ulp beyond the allowance",
            SCALES[s],
            fails[s],
            if fails[s] > 0 { least_fail[s] } else { 0.0 },
            worst_fail[s],
            fail_output[s],
            worst_pass[s]
        );
    }
}
