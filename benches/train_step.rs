//! One training step (forward + backward + AdamW + post-step projection) of GPT+, nGPT and
//! anGPT at one small config on the CPU, all three in the same run so their ratio is
//! meaningful (issue 5 goals: nGPT at most +10% over GPT+, anGPT at most +3%).
//!
//! `cargo bench --bench train_step`. The batch is a fixed slice of the bundled corpus. An
//! architecture that `model::build` cannot build yet is reported and skipped. criterion runs the
//! three one after the other; `normlab bench train-step` interleaves them (ratios less disturbed
//! by other load) and reports CPU time as well.

use candle_core::{DType, Device};
use criterion::{criterion_group, criterion_main, Criterion};
use normlab::data::{BatchSampler, Corpus, Part, Split};
use normlab::model::{build, Arch, ModelConfig};
use normlab::train::step::Trainer;
use normlab::train::{Precision, TrainConfig};

/// The benchmarked size: d 128, 4 heads, 4 layers, batch 8 x 128 tokens.
fn model_config(arch: Arch) -> ModelConfig {
    ModelConfig { arch, d_model: 128, n_heads: 4, n_layers: 4, ..Default::default() }
}

fn train_step(c: &mut Criterion) {
    // As the normlab binary does at start-up (candle allocates per op).
    normlab::train::malloc::retain_freed_memory();
    let device = Device::Cpu;
    let train = TrainConfig { batch_size: 8, seq_len: 128, precision: Precision::F32, ..Default::default() };
    let corpus = Corpus::load_default().expect("bundled corpus");
    let split = Split::new(&corpus, 0.1).expect("split");
    let sampler = BatchSampler::new(&split, Part::Train, train.batch_size, train.seq_len, 1).expect("sampler");
    let batch = sampler.batch(0, &device).expect("batch");
    let mut group = c.benchmark_group("train_step_cpu_d128_l4_b8x128");
    group.sample_size(10);
    for arch in Arch::ALL {
        let model = match build(&model_config(arch), DType::F32, 1, &device) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("train_step: skipping {}: {e}", arch.name());
                continue;
            }
        };
        let mut trainer = Trainer::new(model.as_ref(), &train).expect("trainer");
        group.bench_function(arch.name(), |b| {
            b.iter(|| trainer.step(model.as_ref(), &batch, 1e-3).expect("step"))
        });
    }
    group.finish();
}

criterion_group!(benches, train_step);
criterion_main!(benches);
