//! Criterion benchmarks of the row norms, ours and candle-nn's in the same run.
//!
//! Same cases as `normlab bench norms`: shapes [4096 x 1024] and [16384 x 4096], f32/f16/bf16,
//! every kind forward and backward, plus `candle_nn::ops::rms_norm` and `layer_norm` forward.
//! Throughput is compulsory bytes (forward: x + y; backward: x + dy + dx). Flat sampling with
//! 10 samples keeps `cargo bench --bench norms` to a few minutes on 2 cores; filter with
//! e.g. `cargo bench --bench norms -- forward/4096x1024/f32`.

use std::time::Duration;

use candle_core::WithDType;
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use normlab::bench::candle_ref::{CandleBaseline, CandleOp};
use normlab::bench::cases::{kind_spec, spec_label, BenchDType, Direction, Shape, DEFAULT_TOPK_K, FULL_SHAPES, KIND_NAMES};
use normlab::bench::workload::Workload;
use normlab::norms::{bf16, f16, Element, NormSpec};

fn group_settings(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, bytes: usize) {
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .throughput(Throughput::Bytes(bytes as u64));
}

fn bench_case<T: Element + WithDType>(c: &mut Criterion, shape: Shape, dtype: BenchDType) {
    let kinds: Vec<NormSpec> = KIND_NAMES.iter().map(|k| kind_spec(k, DEFAULT_TOPK_K).expect("default kinds are valid")).collect();
    let mut w = Workload::<T>::new(shape);

    let mut g = c.benchmark_group(format!("forward/{shape}/{dtype}"));
    group_settings(&mut g, Direction::Forward.compulsory_bytes(shape, dtype));
    {
        let candle = CandleBaseline::new(&w).expect("candle tensors");
        for op in CandleOp::ALL {
            let id = match op {
                CandleOp::RmsNorm => "candle_rms_norm",
                CandleOp::LayerNorm => "candle_layer_norm",
            };
            g.bench_function(id, |b| b.iter(|| candle.run(op).expect("candle-nn op")));
        }
    }
    for spec in &kinds {
        g.bench_function(spec_label(spec), |b| b.iter(|| w.forward(spec).expect("forward")));
    }
    g.finish();

    let mut g = c.benchmark_group(format!("backward/{shape}/{dtype}"));
    group_settings(&mut g, Direction::Backward.compulsory_bytes(shape, dtype));
    for spec in &kinds {
        w.forward(spec).expect("forward for the saved statistics");
        g.bench_function(spec_label(spec), |b| b.iter(|| w.backward(spec).expect("backward")));
    }
    g.finish();
}

fn norms(c: &mut Criterion) {
    for shape in FULL_SHAPES {
        for dtype in BenchDType::ALL {
            match dtype {
                BenchDType::F32 => bench_case::<f32>(c, shape, dtype),
                BenchDType::F16 => bench_case::<f16>(c, shape, dtype),
                BenchDType::BF16 => bench_case::<bf16>(c, shape, dtype),
            }
        }
    }
}

criterion_group!(benches, norms);
criterion_main!(benches);
