//! The `normlab` command line.
//!
//! One module per subcommand, each with an `Args` struct (clap derive) and a
//! `run(args) -> Result<(), CliError>`. To add a subcommand `foo`:
//!
//! 1. write `src/cli/foo.rs` with `pub struct FooArgs` (`#[derive(clap::Args)]`) and
//!    `pub fn run(args: FooArgs) -> Result<(), CliError>`;
//! 2. add `pub mod foo;` below and one variant `Foo(foo::FooArgs)` to [`Command`] (its doc
//!    comment is the help line), and its arm in [`Command::run`].
//!
//! Output goes through [`output`] (a closed pipe, as in `normlab ... | head`, ends quietly).
//! Errors are printed as `error: ...` (with their causes) and exit with status 1; usage
//! errors are clap's (status 2). Nothing here panics on bad input.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod bench;
pub mod compare;
pub mod constants;
pub mod error;
pub mod gpu_check;
pub mod nu;
pub mod output;
pub mod train;

pub use error::CliError;

/// normlab: low-precision, alternative-norm training experiments (L2/RMS/LayerNorm, L1,
/// L-inf and Top-k norms).
#[derive(Debug, Parser)]
#[command(name = "normlab", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Scale constants of the L1, L-inf and Top-k norms for a row of n elements.
    Constants(constants::ConstantsArgs),
    /// Speed benchmarks (median times, GB/s, ratio to candle-nn).
    Bench(bench::BenchArgs),
    /// anGPT's normalisation factors by Monte Carlo, with confidence intervals.
    Nu(nu::NuArgs),
    /// Train GPT+, nGPT and anGPT x norms x precisions side by side and report stability and speed.
    Compare(compare::CompareArgs),
    /// Every CUDA kernel on the GPU against the f64 reference: max ulp error per kernel and shape.
    GpuCheck(gpu_check::GpuCheckArgs),
    /// Train one experiment (GPT+, nGPT, anGPT) and write its metrics, checkpoint and summary.
    Train(train::TrainArgs),
}

impl Command {
    pub fn run(self) -> Result<(), CliError> {
        match self {
            Command::Constants(args) => constants::run(args),
            Command::Bench(args) => bench::run(args),
            Command::Nu(args) => nu::run(args),
            Command::Compare(args) => compare::run(args),
            Command::GpuCheck(args) => gpu_check::run(args),
            Command::Train(args) => train::run(args),
        }
    }
}

/// Print an error and its chain of causes to stderr.
fn report(e: &CliError) {
    let mut msg = format!("error: {e}");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!("\n  caused by: {s}"));
        src = s.source();
    }
    eprintln!("{msg}");
}

/// Entry point of the binary: parse, run, map the result to the exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // candle allocates per op: keep freed buffers for reuse (see `train::malloc`).
    crate::train::malloc::retain_freed_memory();
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
