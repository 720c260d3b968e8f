//! Runs the library's unit tests (`normlab_norms::unit_tests`, feature `test-hooks`): the
//! crate is compiled once for a test build instead of twice (src/unit_tests.rs: why).
//!
//! A small stand-in for libtest's harness, with its output lines and exit status: each test
//! runs on its own thread named after the test (so thread-local test switches and counters
//! behave as under libtest, and a panic names its test), on up to `--test-threads` threads at
//! once (default: `RUST_TEST_THREADS`, else the machine's parallelism). Output is not
//! captured: a test's prints appear as they happen.
//!
//! Arguments, as libtest's: name filters (substrings; `--exact` for whole names), `--skip F`,
//! `--list`, `--test-threads N`, `--ignored` (there are none: runs nothing),
//! `--include-ignored`, `-q`/`--quiet`; `--nocapture`, `--show-output` and `--color` are
//! accepted and change nothing. Any other option is refused by name.

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use normlab_norms::unit_tests::{all, UnitTest};

struct Options {
    filters: Vec<String>,
    skip: Vec<String>,
    exact: bool,
    list: bool,
    ignored_only: bool,
    quiet: bool,
    threads: usize,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Options, String> {
    let env_threads = std::env::var("RUST_TEST_THREADS").ok();
    let mut threads = match env_threads.as_deref() {
        Some(v) => v.parse().ok().filter(|&t: &usize| t > 0).ok_or(format!("RUST_TEST_THREADS={v:?} is not a positive count"))?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut o = Options { filters: Vec::new(), skip: Vec::new(), exact: false, list: false, ignored_only: false, quiet: false, threads: 0 };
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if a.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = |name: &str| inline.clone().or_else(|| args.next()).ok_or(format!("{name} needs a value"));
        match flag.as_str() {
            "--exact" => o.exact = true,
            "--list" => o.list = true,
            "--ignored" => o.ignored_only = true,
            "--include-ignored" | "--nocapture" | "--no-capture" | "--show-output" => {}
            "-q" | "--quiet" => o.quiet = true,
            "--color" | "--format" => {
                value(&flag)?;
            }
            "--skip" => o.skip.push(value("--skip")?),
            "--test-threads" => {
                let v = value("--test-threads")?;
                threads = v.parse().ok().filter(|&t: &usize| t > 0).ok_or(format!("--test-threads {v:?} is not a positive count"))?;
            }
            f if f.starts_with('-') => return Err(format!("unknown option {f:?} (this harness: see tests/unit.rs)")),
            _ => o.filters.push(a),
        }
    }
    o.threads = threads;
    Ok(o)
}

fn selected(o: &Options, t: &UnitTest) -> bool {
    let hit = |f: &String| if o.exact { t.name == f } else { t.name.contains(f.as_str()) };
    !o.ignored_only && (o.filters.is_empty() || o.filters.iter().any(hit)) && !o.skip.iter().any(|s| t.name.contains(s.as_str()))
}

/// Runs `t` on its own named thread; its panic (reported by the panic hook) is its failure.
fn run_one(t: &UnitTest) -> bool {
    let body = t.run;
    match std::thread::Builder::new().name(t.name.to_string()).spawn(body) {
        Ok(handle) => handle.join().is_ok(),
        Err(e) => {
            eprintln!("{}: could not start its thread: {e}", t.name);
            false
        }
    }
}

fn main() -> ExitCode {
    let o = match parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let every = all();
    let total = every.len();
    let tests: Vec<UnitTest> = every.into_iter().filter(|t| selected(&o, t)).collect();
    let filtered = total - tests.len();
    if o.list {
        for t in &tests {
            println!("{}: test", t.name);
        }
        return ExitCode::SUCCESS;
    }
    let start = Instant::now();
    println!("\nrunning {} tests", tests.len());
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..o.threads.min(tests.len()) {
            s.spawn(|| {
                while let Some(t) = tests.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let ok = run_one(t);
                    if o.quiet {
                        print!("{}", if ok { "." } else { "F" });
                    } else {
                        println!("test {} ... {}", t.name, if ok { "ok" } else { "FAILED" });
                    }
                    if !ok {
                        failed.lock().unwrap().push(t.name);
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().unwrap();
    failed.sort_unstable();
    if o.quiet {
        println!();
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {filtered} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        tests.len() - failed.len(),
        failed.len(),
        start.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(101)
    }
}
