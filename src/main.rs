//! The `normlab` binary: everything lives in `normlab::cli`.

fn main() -> std::process::ExitCode {
    normlab::cli::main()
}
