//! Shared test helpers: deterministic data, the f64 reference (normlab-norms with f64 storage
//! and `Accum::F64`), and ulp comparisons.
#![allow(dead_code)]

use half::{bf16, f16};
use normlab_kernels::cpu::{self, EmuOptions, Half16};
use normlab_kernels::KernelStats;
use normlab_norms::{row, Accum, DType, NormSpec, RowStats};

/// Conversions between the 16-bit types and f64 for the tests.
pub trait H: Half16 + PartialEq + std::fmt::Debug {
    const DT: DType;
    fn from64(v: f64) -> Self;
    fn to64(self) -> f64;
}
impl H for f16 {
    const DT: DType = DType::F16;
    fn from64(v: f64) -> Self {
        <f16 as normlab_norms::Element>::from_f64(v)
    }
    fn to64(self) -> f64 {
        self.to_f64()
    }
}
impl H for bf16 {
    const DT: DType = DType::BF16;
    fn from64(v: f64) -> Self {
        <bf16 as normlab_norms::Element>::from_f64(v)
    }
    fn to64(self) -> f64 {
        self.to_f64()
    }
}

/// xorshift64*: deterministic, no dependencies.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

/// Kinds of row content.
#[derive(Clone, Copy, Debug)]
pub enum Data {
    /// N(mean, scale^2).
    Normal { mean: f64, scale: f64 },
    /// Small integers in [-m, m]: many exact ties (L-inf and Top-k tie rule).
    Ints(i32),
}

pub fn gen<T: H>(rng: &mut Rng, len: usize, d: Data) -> Vec<T> {
    (0..len)
        .map(|_| match d {
            Data::Normal { mean, scale } => T::from64(mean + scale * rng.normal()),
            Data::Ints(m) => T::from64(((rng.next_u64() % (2 * m as u64 + 1)) as i64 - m as i64) as f64),
        })
        .collect()
}

pub fn to64<T: H>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to64()).collect()
}

/// f64 reference forward: output (unrounded, f64) and statistics.
pub fn ref_forward<T: H>(spec: &NormSpec, x: &[T], n: usize, w: Option<&[T]>, b: Option<&[T]>) -> (Vec<f64>, Vec<RowStats>) {
    let x64 = to64(x);
    let w64 = w.map(to64);
    let b64 = b.map(to64);
    let mut y = vec![0.0; x.len()];
    let mut st = vec![RowStats::default(); x.len() / n];
    row::forward(spec, Accum::F64, &x64, n, w64.as_deref(), b64.as_deref(), &mut y, Some(&mut st)).unwrap();
    (y, st)
}

/// f64 reference backward: dx, dw, db (unrounded).
#[allow(clippy::type_complexity)]
pub fn ref_backward<T: H>(
    spec: &NormSpec,
    x: &[T],
    dy: &[T],
    n: usize,
    w: Option<&[T]>,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (_, st) = ref_forward::<T>(spec, x, n, None, None);
    let x64 = to64(x);
    let dy64 = to64(dy);
    let w64 = w.map(to64);
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; n];
    let mut db = vec![0.0; n];
    row::backward(spec, Accum::F64, &x64, &dy64, n, &st, w64.as_deref(), &mut dx, Some(&mut dw), Some(&mut db)).unwrap();
    (dx, dw, db)
}

/// Largest error in ulps of T over the elements, with an extra absolute allowance `slack[i]`
/// (0 for a pure ulp bound); NaN must match NaN. Returns (max ulps beyond slack, index).
pub fn max_ulp_err<T: H>(got: &[T], want: &[f64], slack: &dyn Fn(usize) -> f64) -> (f64, usize) {
    let mut worst = (0.0f64, 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.to64();
        if w.is_nan() || g.is_nan() {
            if !(w.is_nan() && g.is_nan()) {
                return (f64::INFINITY, i);
            }
            continue;
        }
        // A reference beyond the type's range must round to infinity of the same sign.
        if w.abs() > T::DT.max_finite() {
            let ok = g.is_infinite() && g.signum() == w.signum() || g.abs() == T::DT.max_finite();
            if !ok {
                return (f64::INFINITY, i);
            }
            continue;
        }
        let err = ((g - w).abs() - slack(i)).max(0.0) / T::DT.ulp(*w);
        if err > worst.0 || err.is_nan() {
            worst = (if err.is_nan() { f64::INFINITY } else { err }, i);
        }
    }
    worst
}

/// Run the kernel forward on the emulator and return (y, stats).
pub fn kernel_forward<T: H>(
    spec: &NormSpec,
    x: &[T],
    n: usize,
    w: Option<&[T]>,
    b: Option<&[T]>,
    opts: &EmuOptions,
) -> (Vec<T>, Vec<KernelStats>) {
    let mut y = vec![T::from64(0.0); x.len()];
    let mut st = vec![KernelStats::default(); x.len() / n];
    cpu::forward(spec, x, n, w, b, &mut y, Some(&mut st), opts).unwrap();
    (y, st)
}

/// Compile a C++20 file against the emulator header with the system compiler (`$CXX`, else
/// g++) into the test's temporary directory; panics with the compiler's output on failure.
///
/// The program is kept there under a name that carries a hash of what decides its machine
/// code: the compiler's `--version`, every argument, and the source as preprocessed with those
/// arguments (`-E -P`: every header it includes, the emulator's among them, and no line markers,
/// so that the checkout's path does not enter it). A later run whose hash matches reuses the
/// program instead of compiling it again: CI's target directory persists between runs (`.ci/run`),
/// and the sanitizer builds take 10 to 35 s each on two cores. Any change to a driver, to the
/// kernels it includes or to the flags changes the hash. The program is written under a
/// temporary name and renamed, so that a run killed mid-compile leaves no half-written program.
/// A reused program's debug information names the files of the checkout that compiled it (the
/// paths are left out of the hash): a sanitizer report from it points at those paths.
pub fn compile_cxx(src: &str, out_name: &str, flags: &[&str]) -> std::path::PathBuf {
    let job = CxxJob::new(src, flags);
    let out = job.cached_path(out_name);
    if out.is_file() {
        return out;
    }
    // Unique per process and call: tests run as threads of one process, and two may build the
    // same program at once (the second rename then replaces the first's identical file).
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = out.with_file_name(format!("{}.{}-{call}.partial", out.file_name().unwrap().to_string_lossy(), std::process::id()));
    let o = job.run(&["-o".as_ref(), partial.as_os_str()]);
    assert!(o.status.success(), "{} failed on {src}:\n{}", job.cxx, String::from_utf8_lossy(&o.stderr));
    std::fs::rename(&partial, &out).unwrap_or_else(|e| panic!("cannot rename {} to {}: {e}", partial.display(), out.display()));
    remove_older_builds(&job.dir, out_name, &out);
    out
}

/// One compilation of [`compile_cxx`]: the compiler, its options and the directory it writes
/// into.
pub struct CxxJob {
    cxx: String,
    /// The source, relative to the crate (or absolute).
    src: String,
    /// Every argument but the paths into this checkout (the include directory and the source),
    /// which [`CxxJob::run`] adds: these are what the hash takes.
    opts: Vec<String>,
    dir: std::path::PathBuf,
}

impl CxxJob {
    pub fn new(src: &str, flags: &[&str]) -> CxxJob {
        // `option_env!`: this file is also compiled into examples/centred_bound_sweep.rs, where
        // Cargo sets no test directory (the example compiles no C++; the system one would do).
        let dir = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, std::path::PathBuf::from);
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
        let opts = ["-std=c++20", "-fno-strict-aliasing", "-Wno-unknown-pragmas", "-g"].iter().chain(flags).map(|&o| o.into()).collect();
        CxxJob { cxx, src: src.into(), opts, dir }
    }

    /// Run the compiler on the source with the job's options and `extra`.
    fn run(&self, extra: &[&std::ffi::OsStr]) -> std::process::Output {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        std::process::Command::new(&self.cxx)
            .args(&self.opts)
            .arg("-I")
            .arg(root.join("src/cuda"))
            .args(["-x", "c++"])
            .arg(root.join(&self.src))
            .args(extra)
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C++ compiler '{}': {e}", self.cxx))
    }

    /// Where the program built as `out_name` from these inputs is kept: `out_name-HASH` in the
    /// job's directory (runs the preprocessor, not the compiler).
    pub fn cached_path(&self, out_name: &str) -> std::path::PathBuf {
        let version = std::process::Command::new(&self.cxx)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run the C++ compiler '{}': {e}", self.cxx));
        let pre = self.run(&["-E".as_ref(), "-P".as_ref()]);
        assert!(pre.status.success(), "{} -E failed on {}:\n{}", self.cxx, self.src, String::from_utf8_lossy(&pre.stderr));
        let mut key = Fnv64::default();
        key.write(&version.stdout);
        key.write(self.src.as_bytes());
        for o in &self.opts {
            key.write(o.as_bytes());
        }
        key.write(&pre.stdout);
        self.dir.join(format!("{out_name}-{:016x}", key.0))
    }
}

/// Remove the programs an earlier run compiled as `out_name` from other inputs (same name,
/// another hash), so that the cache holds one program per name.
fn remove_older_builds(dir: &std::path::Path, out_name: &str, keep: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(hash) = name.to_str().and_then(|n| n.strip_prefix(out_name)).and_then(|r| r.strip_prefix('-')) else { continue };
        if hash.len() == 16 && hash.bytes().all(|c| c.is_ascii_hexdigit()) && e.path() != keep {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// FNV-1a, 64 bits: a stable hash (the same on every run and toolchain, unlike std's
/// `DefaultHasher`) for [`compile_cxx`]'s cache names. Each input is followed by its length,
/// so that no two different sequences of inputs hash the same bytes.
struct Fnv64(u64);
impl Default for Fnv64 {
    fn default() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }
}
impl Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain(&(bytes.len() as u64).to_le_bytes()) {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Run a compiled test program; returns (exit code or -1 for a signal, stdout, stderr).
pub fn run_prog(path: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let o = std::process::Command::new(path)
        .args(args)
        .env("TSAN_OPTIONS", "halt_on_error=0 exitcode=66")
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .output()
        .expect("run test program");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The two builds every driver under `tests/sanitize/` runs in.
#[derive(Clone, Copy, Debug)]
pub enum Sanitizer {
    /// ThreadSanitizer: data races on shared and global memory.
    Thread,
    /// AddressSanitizer + UndefinedBehaviorSanitizer: out-of-bounds, misaligned accesses, UB
    /// (UB reports abort instead of recovering).
    AddressUndefined,
}

impl Sanitizer {
    /// The compiler flags of this build; `emulator_catches` builds its planted bugs with the
    /// same ones, so a level that stopped catching them would fail there.
    /// Optimisation levels are chosen for CI time (compile plus run; sanitizers instrument the
    /// source's accesses and operations at any level). Measured on the row driver, 2-vCPU
    /// Xeon guest, 2026-11-29: ASan+UBSan -O1 96 s compile + 16 s run, -O0 25 s + 18 s;
    /// TSan -O1 32 s + 75 s, -O0 10 s + 88 s (its run is thread creation and barriers).
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Sanitizer::Thread => &["-O1", "-fsanitize=thread"],
            Sanitizer::AddressUndefined => &["-O0", "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"],
        }
    }
    /// What the sanitizer's reports start with.
    fn marker(self) -> &'static str {
        match self {
            Sanitizer::Thread => "ThreadSanitizer",
            Sanitizer::AddressUndefined => "AddressSanitizer",
        }
    }
}

/// Build the sanitizer driver `driver` (a path under the crate) as `name` with `san`, run it,
/// and fail unless it exits 0, prints "OK: all kernels ran clean" and stderr holds no report
/// (neither the sanitizer's marker nor a UBSan "runtime error").
pub fn assert_sanitizer_clean(driver: &str, name: &str, san: Sanitizer) {
    let p = compile_cxx(driver, name, san.flags());
    let (rc, out, err) = run_prog(&p, &[]);
    assert!(
        rc == 0 && out.contains("OK: all kernels ran clean") && !err.contains(san.marker()) && !err.contains("runtime error"),
        "{name}: rc {rc}\nstdout:\n{out}\nstderr:\n{}",
        &err[..err.len().min(20000)]
    );
}
