//! Caches of compiled kernel images (CUBIN or PTX): in memory for the process, and on disk
//! (`~/.cache/normlab/ptx` by default) so that NVRTC runs once per source, options, target
//! architecture and NVRTC version, not once per process.
//!
//! # Key
//! [`CacheKey`] hashes (SHA-256) the source text, the NVRTC options and the image kind, and
//! names the target architecture and the NVRTC version in clear: any edit of the kernels, a new
//! flag, another GPU generation or another NVRTC gives another file.
//!
//! # Entries
//! One file per key: a header line `NLIMG1 <sha256 of the payload> <payload length>\n`, then
//! the payload. Entries are written atomically (a uniquely named temporary file in the same
//! directory, flushed and synced, then renamed over the entry), so a reader sees either no
//! entry or a whole one, even with several processes compiling at once. An entry that does not
//! verify (truncated, bit flips, another format) is treated as a miss: the image is recompiled
//! and the entry rewritten. A cache directory that cannot be written only costs the
//! recompilation; it never fails a launch.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

const MAGIC: &str = "NLIMG1";

/// What NVRTC produced: a CUBIN for one exact architecture, or PTX (JIT-compiled by the driver).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageKind {
    Cubin,
    Ptx,
}

impl ImageKind {
    pub fn ext(self) -> &'static str {
        match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        }
    }
}

/// Identity of one compiled image.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Short module name (for humans: `rownorm`, `copy`).
    pub module: String,
    /// Target, e.g. `sm_90` (CUBIN) or `compute_90` (PTX).
    pub arch: String,
    /// NVRTC (major, minor).
    pub nvrtc: (i32, i32),
    pub kind: ImageKind,
    /// SHA-256 (hex) of the source, the options and the kind.
    pub digest: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

impl CacheKey {
    pub fn new(module: &str, source: &str, options: &[String], arch: &str, nvrtc: (i32, i32), kind: ImageKind) -> Self {
        let mut h = Sha256::new();
        // Length-prefixed fields, so that no two different inputs hash the same bytes.
        for part in std::iter::once(source).chain(options.iter().map(String::as_str)).chain([kind.ext()]) {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        CacheKey { module: module.to_string(), arch: arch.to_string(), nvrtc, kind, digest: hex(&h.finalize()) }
    }

    /// File name of the entry: `<module>-<digest16>-<arch>-nvrtc<major>.<minor>.<ext>`.
    pub fn file_name(&self) -> String {
        let module: String = self.module.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        format!("{module}-{}-{}-nvrtc{}.{}.{}", &self.digest[..16], self.arch, self.nvrtc.0, self.nvrtc.1, self.kind.ext())
    }
}

/// The on-disk cache directory.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

/// Where a cached image came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Memory,
    Disk,
    Compiled,
}

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskCache { dir: dir.into() }
    }

    /// `$NORMLAB_PTX_CACHE`, else `$XDG_CACHE_HOME/normlab/ptx`, else `$HOME/.cache/normlab/ptx`.
    pub fn default_dir() -> Option<PathBuf> {
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        env("NORMLAB_PTX_CACHE")
            .or_else(|| env("XDG_CACHE_HOME").map(|d| d.join("normlab/ptx")))
            .or_else(|| env("HOME").map(|h| h.join(".cache/normlab/ptx")))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The entry's payload if it exists and verifies; `None` for a miss or a corrupt entry.
    pub fn load(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.path(key)).ok()?;
        decode(&bytes)
    }

    /// Write the entry atomically (temporary file in the same directory, sync, rename).
    pub fn store(&self, key: &CacheKey, payload: &[u8]) -> std::io::Result<PathBuf> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key);
        let tmp = self.dir.join(format!(
            ".{}.tmp-{}-{}",
            key.file_name(),
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&encode(payload))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        let r = write();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r.map(|()| path)
    }
}

/// Header line + payload.
fn encode(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{MAGIC} {} {}\n", sha256_hex(payload), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The payload of an encoded entry, if its header, length and hash agree.
fn decode(bytes: &[u8]) -> Option<Vec<u8>> {
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..nl]).ok()?;
    let mut f = header.split(' ');
    let (magic, digest, len) = (f.next()?, f.next()?, f.next()?.parse::<usize>().ok()?);
    let payload = &bytes[nl + 1..];
    (magic == MAGIC && f.next().is_none() && payload.len() == len && sha256_hex(payload) == digest).then(|| payload.to_vec())
}

/// One key's image in memory, once loaded or compiled; its own lock, so that only callers of
/// the same key wait for its compilation.
type Slot = Arc<Mutex<Option<Arc<[u8]>>>>;

/// Memory cache in front of an optional disk cache. Different keys are loaded and compiled in
/// parallel (`normlab gpu-check --precompile` compiles the kernel families on several threads:
/// NVRTC is thread-safe across programs); callers of one key wait for its single compilation.
#[derive(Debug, Default)]
pub struct ImageCache {
    slots: Mutex<HashMap<CacheKey, Slot>>,
    disk: Option<DiskCache>,
}

impl ImageCache {
    pub fn new(disk: Option<DiskCache>) -> Self {
        ImageCache { slots: Mutex::new(HashMap::new()), disk }
    }

    pub fn disk(&self) -> Option<&DiskCache> {
        self.disk.as_ref()
    }

    /// The image for `key`: from memory, else from disk, else `compile()` (then stored in both).
    /// A disk write failure is reported through `on_store_error` and otherwise ignored; a
    /// failed compilation stores nothing, so the next call tries again. Only `key`'s slot is
    /// locked while loading or compiling: other keys proceed in parallel.
    pub fn get_or_compile<E>(
        &self,
        key: &CacheKey,
        compile: impl FnOnce() -> Result<Vec<u8>, E>,
        on_store_error: impl FnOnce(&Path, std::io::Error),
    ) -> Result<(Arc<[u8]>, Origin), E> {
        let slot = self.slots.lock().unwrap_or_else(|p| p.into_inner()).entry(key.clone()).or_default().clone();
        let mut mem = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(img) = mem.as_ref() {
            return Ok((img.clone(), Origin::Memory));
        }
        let (img, origin) = match self.disk.as_ref().and_then(|d| d.load(key)) {
            Some(bytes) => (bytes, Origin::Disk),
            None => {
                let bytes = compile()?;
                if let Some(d) = &self.disk {
                    if let Err(e) = d.store(key, &bytes) {
                        on_store_error(&d.path(key), e);
                    }
                }
                (bytes, Origin::Compiled)
            }
        };
        let img: Arc<[u8]> = img.into();
        *mem = Some(img.clone());
        Ok((img, origin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("normlab-cache-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn key(src: &str) -> CacheKey {
        CacheKey::new("rownorm", src, &["--std=c++17".into()], "sm_90", (12, 9), ImageKind::Cubin)
    }

    #[test]
    fn key_changes_with_every_input() {
        let base = key("a");
        assert_eq!(base, key("a"));
        let opts = vec!["--std=c++17".to_string()];
        let others = [
            key("b"),
            CacheKey::new("rownorm", "a", &["--std=c++20".into()], "sm_90", (12, 9), ImageKind::Cubin),
            CacheKey::new("rownorm", "a", &opts, "sm_80", (12, 9), ImageKind::Cubin),
            CacheKey::new("rownorm", "a", &opts, "sm_90", (12, 8), ImageKind::Cubin),
            CacheKey::new("rownorm", "a", &opts, "sm_90", (12, 9), ImageKind::Ptx),
            // Field boundaries are part of the hash: moving text between source and options.
            CacheKey::new("rownorm", "a--std=c++17", &[], "sm_90", (12, 9), ImageKind::Cubin),
        ];
        for k in &others {
            assert_ne!(k.file_name(), base.file_name(), "{k:?}");
        }
        assert_eq!(base.file_name(), format!("rownorm-{}-sm_90-nvrtc12.9.cubin", &base.digest[..16]));
    }

    #[test]
    fn store_is_atomic_and_loads_back() {
        let dir = tmpdir("roundtrip");
        let cache = DiskCache::new(&dir);
        let k = key("src");
        assert_eq!(cache.load(&k), None);
        let path = cache.store(&k, b"\x7fELF payload").unwrap();
        assert_eq!(path, dir.join(k.file_name()));
        assert_eq!(cache.load(&k).as_deref(), Some(&b"\x7fELF payload"[..]));
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(names, vec![k.file_name()]);
        // Overwrite.
        cache.store(&k, b"second").unwrap();
        assert_eq!(cache.load(&k).as_deref(), Some(&b"second"[..]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_entries_are_misses() {
        let dir = tmpdir("corrupt");
        let cache = DiskCache::new(&dir);
        let k = key("src");
        let path = cache.store(&k, b"0123456789").unwrap();
        let good = std::fs::read(&path).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let truncated = good[..good.len() - 1].to_vec();
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        for bad in [flipped, truncated, bad_magic, b"".to_vec(), b"garbage without newline".to_vec()] {
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(cache.load(&k), None, "{:?}", String::from_utf8_lossy(&bad));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_entry_is_recompiled_and_rewritten() {
        let dir = tmpdir("recompile");
        let k = key("src");
        let compiles = Cell::new(0);
        let compile = || -> Result<Vec<u8>, String> {
            compiles.set(compiles.get() + 1);
            Ok(b"IMAGE".to_vec())
        };
        let no_err = |p: &Path, e: std::io::Error| panic!("store {}: {e}", p.display());
        // First process: compiles and stores; a second lookup is served from memory.
        let c1 = ImageCache::new(Some(DiskCache::new(&dir)));
        assert_eq!(c1.get_or_compile(&k, compile, no_err).unwrap().1, Origin::Compiled);
        assert_eq!(c1.get_or_compile(&k, compile, no_err).unwrap().1, Origin::Memory);
        assert_eq!(compiles.get(), 1);
        // Second process: served from disk.
        let c2 = ImageCache::new(Some(DiskCache::new(&dir)));
        let (img, origin) = c2.get_or_compile(&k, compile, no_err).unwrap();
        assert_eq!((&img[..], origin, compiles.get()), (&b"IMAGE"[..], Origin::Disk, 1));
        // Corrupt the entry: the third process recompiles and repairs it.
        let path = DiskCache::new(&dir).path(&k);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let c3 = ImageCache::new(Some(DiskCache::new(&dir)));
        let (img, origin) = c3.get_or_compile(&k, compile, no_err).unwrap();
        assert_eq!((&img[..], origin, compiles.get()), (&b"IMAGE"[..], Origin::Compiled, 2));
        assert_eq!(DiskCache::new(&dir).load(&k).as_deref(), Some(&b"IMAGE"[..]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Two keys compile at the same time: each compilation waits (up to 20 s) for the other to
    /// start, which a cache that held one lock over every compilation would never allow.
    /// Callers of one key share its one compilation.
    #[test]
    fn different_keys_compile_in_parallel_one_key_once() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::mpsc::channel;
        use std::time::Duration;
        let cache = ImageCache::new(None);
        let (to_b, from_a) = channel::<()>();
        let (to_a, from_b) = channel::<()>();
        let meet = |tell: std::sync::mpsc::Sender<()>, hear: std::sync::mpsc::Receiver<()>, image: &'static [u8]| {
            move || -> Result<Vec<u8>, String> {
                tell.send(()).map_err(|e| e.to_string())?;
                hear.recv_timeout(Duration::from_secs(20)).map_err(|e| format!("the other compilation never started: {e}"))?;
                Ok(image.to_vec())
            }
        };
        let (ra, rb) = std::thread::scope(|s| {
            let a = s.spawn(|| cache.get_or_compile(&key("a"), meet(to_b, from_b, b"A"), |_, _| ()));
            let b = s.spawn(|| cache.get_or_compile(&key("b"), meet(to_a, from_a, b"B"), |_, _| ()));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert_eq!((&ra.unwrap().0[..], &rb.unwrap().0[..]), (&b"A"[..], &b"B"[..]));

        let compiles = AtomicUsize::new(0);
        let origins: Vec<Origin> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let compile = || -> Result<Vec<u8>, String> {
                            compiles.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(50));
                            Ok(b"C".to_vec())
                        };
                        cache.get_or_compile(&key("c"), compile, |_, _| ()).unwrap().1
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(compiles.load(Ordering::SeqCst), 1);
        assert_eq!(origins.iter().filter(|o| **o == Origin::Compiled).count(), 1, "{origins:?}");
    }

    #[test]
    fn compile_errors_pass_through_and_unwritable_dirs_only_warn() {
        // A file where the directory should be: the store fails, the image is still returned.
        let dir = tmpdir("unwritable");
        std::fs::write(&dir, b"not a directory").unwrap();
        let c = ImageCache::new(Some(DiskCache::new(dir.join("sub"))));
        let warned = Cell::new(false);
        let (img, origin) = c.get_or_compile(&key("x"), || Ok::<_, String>(b"I".to_vec()), |_, _| warned.set(true)).unwrap();
        assert_eq!((&img[..], origin, warned.get()), (&b"I"[..], Origin::Compiled, true));
        let e = c.get_or_compile(&key("y"), || Err::<Vec<u8>, _>("log".to_string()), |_, _| ()).unwrap_err();
        assert_eq!(e, "log");
        // A failed compilation leaves nothing behind: the next call compiles again.
        let (img, origin) = c.get_or_compile(&key("y"), || Ok::<_, String>(b"Y".to_vec()), |_, _| ()).unwrap();
        assert_eq!((&img[..], origin), (&b"Y"[..], Origin::Compiled));
        std::fs::remove_file(&dir).unwrap();
    }
}
