//! `normlab bench ...`: speed benchmarks. `bench norms` measures the machine's copy
//! bandwidth, then every norm kind forward and backward against candle-nn's `rms_norm` and
//! `layer_norm` (see `crate::bench` for what is counted, and `crate::bench::report` for the
//! JSON schema).

use clap::{Args, Subcommand};
use indicatif::ProgressBar;

use crate::bench::cases::{kind_spec, BenchDType, Shape, DEFAULT_TOPK_K, KIND_NAMES};
use crate::bench::report::render_text;
use crate::bench::run::{run as run_bench, BenchConfig};
use crate::cli::output::{print, print_json};
use crate::cli::CliError;

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub target: Option<BenchTarget>,
    /// `cuda`: the GPU benchmark (copy bandwidth and every kernel on [16384 x 4096]), run as
    /// `normlab bench --device cuda [--json]`; `cpu`: the subcommands.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    pub device: String,
    #[command(flatten)]
    pub cuda: crate::bench::cuda_cli::CudaBenchArgs,
}

#[derive(Debug, Subcommand)]
pub enum BenchTarget {
    /// Row norms (rms, layer, unit-l2, l1, linf, topk) forward and backward vs candle-nn.
    Norms(NormsArgs),
    /// One CPU training step of GPT+, nGPT and anGPT, interleaved in one process: medians and
    /// the ratios to GPT+ (issue 5 goals: nGPT <= 1.10, anGPT <= 1.03).
    TrainStep(TrainStepArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "Builds the three models at the size of benches/train_step.rs (d 128, 4 heads, 4 layers, batch 8 x 128, f32), \
warms each up, then times training steps round-robin (the first model of a round rotates) so that load from other \
processes hits all three alike. Prints per model the median, min and max step time and tokens/s, and the ratios of the \
medians to GPT+'s.\n\n\
Examples:\n  normlab bench train-step\n  normlab bench train-step --reps 60 --json\n  normlab bench train-step --d-model 256 --layers 2")]
pub struct TrainStepArgs {
    /// Print the report as JSON (schema normlab.bench.train_step/1) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Timed steps per model (the median is reported).
    #[arg(long, default_value_t = 30)]
    pub reps: usize,
    /// Untimed steps per model first.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    #[arg(long, default_value_t = 128)]
    pub d_model: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 4)]
    pub layers: usize,
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    /// Precision mode: f32, bf16_mixed, f16_mixed, pure_bf16, pure_f16.
    #[arg(long, default_value = "f32")]
    pub precision: String,
    /// Architectures, comma-separated (gpt_plus, ngpt, angpt) [default: all three].
    #[arg(long, value_delimiter = ',')]
    pub archs: Vec<String>,
}

fn run_train_step(args: TrainStepArgs) -> Result<(), CliError> {
    use crate::bench::train_step::{render_text, run, TrainStepConfig};
    let precision = crate::train::Precision::ALL
        .into_iter()
        .find(|p| p.name() == args.precision)
        .ok_or_else(|| CliError::InvalidArg { flag: "--precision", value: args.precision.clone(), why: "expected f32, bf16_mixed, f16_mixed, pure_bf16 or pure_f16".into() })?;
    let archs = if args.archs.is_empty() {
        crate::model::Arch::ALL.to_vec()
    } else {
        args.archs
            .iter()
            .map(|a| crate::model::Arch::parse(a).map_err(|e| CliError::InvalidArg { flag: "--archs", value: a.clone(), why: e.to_string() }))
            .collect::<Result<Vec<_>, _>>()?
    };
    let cfg = TrainStepConfig {
        d_model: args.d_model,
        n_heads: args.heads,
        n_layers: args.layers,
        batch_size: args.batch,
        seq_len: args.seq,
        precision,
        warmup: args.warmup,
        reps: args.reps,
        archs,
        ..Default::default()
    };
    let bar = ProgressBar::new(0);
    let report = run(&cfg, &mut |label| bar.set_message(label.to_string()));
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        print_json(&report)
    } else {
        print(&render_text(&report))
    }
}

#[derive(Debug, Args)]
#[command(after_help = "Prints the copy bandwidth (parallel memcpy, read + write bytes), then per case the median time, \
GB/s of compulsory bytes (forward: x read + y written; backward: x, dy read + dx written), the fraction of copy \
bandwidth, and for forwards the ratio candle time / our time. Progress goes to stderr.\n\n\
Examples:\n  normlab bench norms\n  normlab bench norms --quick --json\n  normlab bench norms --shapes 4096x1024 --dtypes f32,bf16 --kinds rms,topk --reps 5")]
pub struct NormsArgs {
    /// Print the report as JSON (schema normlab.bench.norms/1) on stdout.
    #[arg(long)]
    pub json: bool,
    /// Shapes ROWSxN, comma-separated [default: 4096x1024,16384x4096; --quick: 512x1024].
    #[arg(long, value_delimiter = ',')]
    pub shapes: Vec<String>,
    /// Storage dtypes, comma-separated: f32, f16, bf16 [default: all three].
    #[arg(long, value_delimiter = ',')]
    pub dtypes: Vec<String>,
    /// Norm kinds, comma-separated: rms, layer, unit-l2, l1, linf, topk [default: all].
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// k of the topk kind.
    #[arg(long, default_value_t = DEFAULT_TOPK_K)]
    pub topk_k: usize,
    /// Timed runs per case (the median is reported) [default: 10; --quick: 3].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Rounds the timed runs are spread over: each round times every case of a shape x dtype
    /// in turn (candle first), so the ratios compare times taken in the same stretch of the
    /// machine's load [default: 5; --quick: 1]; 1..=reps.
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Untimed warm-up runs per case, in every round [default: 3; --quick: 1].
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Size of the copy-bandwidth buffer in MiB [default: 256; --quick: 32].
    #[arg(long)]
    pub copy_mib: Option<usize>,
    /// Seconds instead of minutes: small shape, few runs (a smoke test; not for the goals).
    #[arg(long)]
    pub quick: bool,
    /// Streamed forward rows written group by group from the store pass instead of staged
    /// (`row::STAGED_OUTPUT` off): to measure, in the benchmark's own conditions, what
    /// staging brings. The report's config says `"staged_output": false`.
    #[arg(long, hide = true)]
    pub unstaged: bool,
}

fn parse_list<T>(items: &[String], parse: impl Fn(&str) -> Result<T, crate::bench::BenchError>) -> Result<Vec<T>, CliError> {
    Ok(items.iter().filter(|s| !s.trim().is_empty()).map(|s| parse(s)).collect::<Result<Vec<_>, _>>()?)
}

/// The benchmark configuration the flags describe.
pub fn config(args: &NormsArgs) -> Result<BenchConfig, CliError> {
    let mut cfg = if args.quick { BenchConfig::quick() } else { BenchConfig::full() };
    if args.topk_k == 0 {
        return Err(CliError::InvalidArg { flag: "--topk-k", value: "0".into(), why: "k must be at least 1".into() });
    }
    cfg.kinds = KIND_NAMES.iter().map(|k| kind_spec(k, args.topk_k)).collect::<Result<_, _>>()?;
    if !args.shapes.is_empty() {
        cfg.shapes = parse_list(&args.shapes, |s| s.parse::<Shape>())?;
    }
    if !args.dtypes.is_empty() {
        cfg.dtypes = parse_list(&args.dtypes, |s| s.parse::<BenchDType>())?;
    }
    if !args.kinds.is_empty() {
        cfg.kinds = parse_list(&args.kinds, |s| kind_spec(s, args.topk_k))?;
    }
    if let Some(r) = args.reps {
        if r == 0 {
            return Err(CliError::InvalidArg { flag: "--reps", value: "0".into(), why: "need at least 1 timed run".into() });
        }
        cfg.reps = r;
    }
    match args.rounds {
        Some(0) => return Err(CliError::InvalidArg { flag: "--rounds", value: "0".into(), why: "need at least 1 round".into() }),
        Some(r) if r > cfg.reps => {
            return Err(CliError::InvalidArg {
                flag: "--rounds",
                value: r.to_string(),
                why: format!("more rounds than timed runs ({}): every round times each case at least once", cfg.reps),
            })
        }
        Some(r) => cfg.rounds = r,
        // Fewer timed runs than the default rounds (--reps 3): one run per round.
        None => cfg.rounds = cfg.rounds.min(cfg.reps),
    }
    if let Some(w) = args.warmup {
        cfg.warmup = w;
    }
    cfg.staged_output = !args.unstaged;
    if let Some(m) = args.copy_mib {
        if m == 0 || m > 1 << 16 {
            return Err(CliError::InvalidArg { flag: "--copy-mib", value: m.to_string(), why: "need 1..=65536 MiB".into() });
        }
        cfg.copy_buffer_bytes = m << 20;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn run_norms(args: NormsArgs) -> Result<(), CliError> {
    let cfg = config(&args)?;
    let bar = crate::cli::output::step_bar(cfg.steps());
    let mut started = false;
    let report = run_bench(&cfg, &mut |label| {
        // Called before each step: count the previous one as done.
        if started {
            bar.inc(1);
        }
        started = true;
        bar.set_message(label.to_string());
    });
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        print_json(&report)
    } else {
        print(&render_text(&report))
    }
}

pub fn run(args: BenchArgs) -> Result<(), CliError> {
    match (args.device.as_str(), args.target) {
        ("cuda", None) => crate::bench::cuda_cli::run(args.cuda),
        ("cuda", Some(_)) => Err(CliError::InvalidArg {
            flag: "--device",
            value: "cuda".into(),
            why: "the GPU benchmark takes no subcommand: run `normlab bench --device cuda [--json]`".into(),
        }),
        (_, Some(BenchTarget::Norms(a))) => run_norms(a),
        (_, Some(BenchTarget::TrainStep(a))) => run_train_step(a),
        (device, None) => Err(CliError::InvalidArg {
            flag: "--device",
            value: device.into(),
            why: "name a benchmark (`normlab bench norms`) or use `--device cuda`".into(),
        }),
    }
}
