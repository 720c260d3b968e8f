//! Records the git commit this crate is built from, and whether tracked files differed from
//! it, as `NORMLAB_BUILD_GIT_COMMIT` and `NORMLAB_BUILD_GIT_DIRTY` (`bench::machine::Provenance`).
//!
//! # Why
//! Reports and benchmark JSON name the commit of the code that produced them. Asking git at run
//! time names the working directory's commit instead: a binary kept from an earlier commit and
//! run in a newer checkout (a baseline in an A/B) was labelled with the newer one. Neither is
//! set when the source is not a git checkout, or git is not installed: the reports then say
//! "unknown".
//!
//! The script reruns when HEAD moves (HEAD, the branch's refs directory, packed refs: those of
//! them that exist) and when a file of the sources changes (dirtiness), so the values follow
//! the tree the crate is compiled from.
//! Its `git status` takes no optional lock: a status that rewrote the index would otherwise
//! leave git's files newer than this run for nothing.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    for source in ["src", "norms/src", "norms/Cargo.toml", "kernels", "Cargo.toml", "Cargo.lock", "build.rs"] {
        println!("cargo:rerun-if-changed={source}");
    }
    let Some(git_dir) = git(&["rev-parse", "--git-dir"]) else {
        return;
    };
    let git_dir = Path::new(&git_dir);
    // Only paths that exist: cargo takes a missing one as changed, and would rerun this script
    // and recompile the crate on every cargo command (a checkout without `packed-refs`). The
    // branch's ref is watched through its directory (`refs/heads`): a commit on a branch whose
    // ref was only packed creates the loose file there.
    let mut watched = vec![git_dir.join("HEAD"), git_dir.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git_dir.join(&branch).parent().map(Path::to_path_buf));
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    let Some(commit) = git(&["rev-parse", "HEAD"]) else {
        return;
    };
    println!("cargo:rustc-env=NORMLAB_BUILD_GIT_COMMIT={commit}");
    if let Some(status) = git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]) {
        println!("cargo:rustc-env=NORMLAB_BUILD_GIT_DIRTY={}", !status.is_empty());
    }
}
