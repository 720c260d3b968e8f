//! Writing results to stdout without panicking (`println!` panics on a closed pipe).

use std::io::Write;

use crate::cli::CliError;

/// Write `text` (and a newline) to stdout and flush.
pub fn print(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// The step bar of the long commands (bench, gpu-check): elapsed time, bar, count, message, on
/// stderr, drawn only when stderr is a terminal (indicatif hides it otherwise).
pub fn step_bar(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Pretty JSON of `value` on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    print(&serde_json::to_string_pretty(value)?)
}
