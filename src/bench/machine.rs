//! Where and with what a benchmark ran: CPU, cores, versions, git commit, time. Numbers
//! without this are not comparable.

use std::process::Command;

/// The workspace lock file, read at compile time: the exact versions of the crates that were
/// built into this binary.
const CARGO_LOCK: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"));

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MachineInfo {
    /// `model name` of the first processor in /proc/cpuinfo (None where that file is missing).
    pub cpu_model: Option<String>,
    /// `std::thread::available_parallelism` (honours CPU affinity and cgroup quotas).
    pub logical_cores: usize,
    /// Threads in the rayon pool the norms run on.
    pub rayon_threads: usize,
    /// MemTotal of /proc/meminfo, in bytes.
    pub memory_bytes: Option<u64>,
    /// 1-minute load average of /proc/loadavg when the run started: other work on the
    /// machine (builds, other benchmarks) slows a memory-bound benchmark; this shows it.
    pub load_avg_1m: Option<f64>,
    pub os: String,
    pub arch: String,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Versions {
    pub normlab: String,
    pub normlab_norms: Option<String>,
    pub candle_core: Option<String>,
    pub candle_nn: Option<String>,
    /// `rustc --version` of the compiler on PATH at run time (usually the one that built this).
    pub rustc: Option<String>,
    /// `debug` or `release` (debug numbers are meaningless for speed).
    pub profile: String,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    pub machine: MachineInfo,
    pub versions: Versions,
    /// The git commit this binary was built from (`build.rs`), if it was built from a git
    /// checkout: not the working directory's, which a binary kept from another commit and run
    /// here would otherwise be labelled with.
    pub git_commit: Option<String>,
    /// Whether tracked files differed from that commit when it was built.
    pub git_dirty: Option<bool>,
    /// Seconds since the Unix epoch when the run started.
    pub unix_time: u64,
}

fn first_line_with<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim())
}

/// Parse `model name` from a /proc/cpuinfo text.
pub fn cpu_model_from(cpuinfo: &str) -> Option<String> {
    first_line_with(cpuinfo, "model name").filter(|s| !s.is_empty()).map(str::to_string)
}

/// Parse `MemTotal` (kB) from a /proc/meminfo text, in bytes.
pub fn memory_from(meminfo: &str) -> Option<u64> {
    let v = first_line_with(meminfo, "MemTotal")?;
    v.trim_end_matches("kB").trim().parse::<u64>().ok().map(|kb| kb * 1024)
}

/// The version of package `name` in a Cargo.lock text.
pub fn locked_version(lock: &str, name: &str) -> Option<String> {
    let needle = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == needle {
            let v = lines.next()?.trim();
            return v.strip_prefix("version = \"").and_then(|v| v.strip_suffix('"')).map(str::to_string);
        }
    }
    None
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl MachineInfo {
    pub fn detect() -> Self {
        MachineInfo {
            cpu_model: std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| cpu_model_from(&s)),
            logical_cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            rayon_threads: rayon::current_num_threads(),
            memory_bytes: std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| memory_from(&s)),
            load_avg_1m: std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()),
            os: std::env::consts::OS.to_string(),
            arch: std::env::consts::ARCH.to_string(),
        }
    }
}

impl Versions {
    pub fn detect() -> Self {
        Versions {
            normlab: env!("CARGO_PKG_VERSION").to_string(),
            normlab_norms: locked_version(CARGO_LOCK, "normlab-norms"),
            candle_core: locked_version(CARGO_LOCK, "candle-core"),
            candle_nn: locked_version(CARGO_LOCK, "candle-nn"),
            rustc: command_output("rustc", &["--version"]),
            profile: if cfg!(debug_assertions) { "debug" } else { "release" }.to_string(),
        }
    }
}

impl Provenance {
    pub fn detect() -> Self {
        let git_commit = option_env!("NORMLAB_BUILD_GIT_COMMIT").map(str::to_string);
        let git_dirty = option_env!("NORMLAB_BUILD_GIT_DIRTY").and_then(|d| d.parse().ok());
        Provenance {
            machine: MachineInfo::detect(),
            versions: Versions::detect(),
            git_commit,
            git_dirty,
            unix_time: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files_and_lock() {
        let cpu = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: x\nprocessor\t: 1\nmodel name\t: other\n";
        assert_eq!(cpu_model_from(cpu).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model_from("processor : 0\n"), None);
        assert_eq!(memory_from("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24_576_000 * 1024));
        let lock = "[[package]]\nname = \"candle-nn\"\nversion = \"0.11.1\"\nsource = \"x\"\n";
        assert_eq!(locked_version(lock, "candle-nn").as_deref(), Some("0.11.1"));
        assert_eq!(locked_version(lock, "candle"), None);
        // The real lock file has the baseline's version.
        assert!(locked_version(CARGO_LOCK, "candle-nn").is_some());
    }

    /// Built from a git checkout (as CI's is), the provenance names the commit `build.rs`
    /// recorded, whatever the working directory: 40 hex digits, and a dirtiness.
    #[test]
    fn provenance_names_the_build_commit() {
        let p = Provenance::detect();
        // Built in a checkout, the commit is the checkout's HEAD: build.rs reruns when HEAD
        // moves, so a test binary never outlives the commit it was built from.
        let head = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if let Some(head) = &head {
            assert_eq!(p.git_commit.as_deref(), Some(head.as_str()), "the recorded build commit is not the checkout's HEAD");
        }
        match p.git_commit {
            Some(c) => {
                assert!(c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()), "not a commit: {c:?}");
                assert!(p.git_dirty.is_some(), "a commit without its dirtiness");
            }
            None => eprintln!("not built from a git checkout: no commit to check"),
        }
    }
}
