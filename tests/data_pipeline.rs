//! The data pipeline end to end: corpus loading and checksums, split sizes, seeded batches,
//! evaluation windows, unigram entropy, and the typed errors.

use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use normlab::data::{
    default_corpus_path, unigram_entropy, BatchSampler, Corpus, DataError, EvalWindows, Part,
    Split, VOCAB_SIZE,
};
use proptest::prelude::*;

/// A fresh scratch directory for one test, removed when the test ends, passed or failed (drop
/// runs on unwind), so test runs leave nothing behind in the temporary directory.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("normlab-data-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn corpus(text: &[u8]) -> Corpus {
    Corpus::from_bytes("<test>", text.to_vec()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// The committed default corpus

#[test]
fn default_corpus_loads_and_its_checksum_is_verified() {
    let c = Corpus::load_default().unwrap();
    assert!(
        c.checksum_verified(),
        "shakespeare.sha256 should sit beside the corpus"
    );
    assert_eq!(c.len(), 5_057_280);
    let listed = std::fs::read_to_string(
        default_corpus_path()
            .parent()
            .unwrap()
            .join("shakespeare.sha256"),
    )
    .unwrap();
    assert!(listed.starts_with(c.sha256()), "{listed} vs {}", c.sha256());
    assert_eq!(
        c.sha256(),
        "a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f"
    );
    assert!(c.bytes().is_ascii());
    assert!(c.bytes().starts_with(b"ALL'S WELL THAT ENDS WELL\n"));
    assert!(c.bytes().ends_with(b"\n"));
}

#[test]
fn default_corpus_entropy_matches_an_independent_computation() {
    // Computed separately with Python's collections.Counter and math.log on the decompressed
    // file: -sum p ln p = 3.3296280301595527 nats = 4.803637847116074 bits, 84 distinct bytes.
    let h = Corpus::load_default().unwrap().unigram_entropy();
    assert_eq!(h.distinct, 84);
    assert_eq!(h.tokens, 5_057_280);
    assert!(
        (h.nats - 3.329_628_030_159_552_7).abs() < 1e-12,
        "{}",
        h.nats
    );
    assert!((h.bits - 4.803_637_847_116_074).abs() < 1e-12, "{}", h.bits);
}

#[test]
fn default_split_sizes() {
    let c = Corpus::load_default().unwrap();
    let s = Split::new(&c, 0.1).unwrap();
    // ceil(5_057_280 * 0.1) = 505_728.
    assert_eq!(s.len(Part::Val), 505_728);
    assert_eq!(s.len(Part::Train), 5_057_280 - 505_728);
    assert_eq!(s.range(Part::Train).end, s.range(Part::Val).start);
    assert_eq!(s.bytes(Part::Val), &c.bytes()[4_551_552..]);
}

// ---------------------------------------------------------------------------------------------
// Checksums

#[test]
fn gz_and_plain_with_checksum_beside_are_verified() {
    let dir = scratch("verified");
    let text = b"To be, or not to be, that is the question.\n";
    let hash = normlab::data::checksum::sha256_hex(text);
    std::fs::write(dir.join("q.txt.gz"), gzip(text)).unwrap();
    std::fs::write(dir.join("q.sha256"), format!("{hash}  q.txt\n")).unwrap();
    let c = Corpus::load(dir.join("q.txt.gz")).unwrap();
    assert!(c.checksum_verified());
    assert_eq!(c.bytes(), text);

    // Plain text with `<file>.sha256`, upper-case hex, no file name.
    std::fs::write(dir.join("p.txt"), text).unwrap();
    std::fs::write(dir.join("p.txt.sha256"), hash.to_uppercase()).unwrap();
    let c = Corpus::load(dir.join("p.txt")).unwrap();
    assert!(c.checksum_verified());
    assert_eq!(c.sha256(), hash);

    // No checksum file: loads, not verified.
    std::fs::write(dir.join("free.txt"), text).unwrap();
    let c = Corpus::load(dir.join("free.txt")).unwrap();
    assert!(!c.checksum_verified());
    assert_eq!(c.sha256(), hash);
}

#[test]
fn checksum_mismatch_names_both_hashes() {
    let dir = scratch("mismatch");
    let good = b"Now is the winter of our discontent\n";
    let bad = b"Now is the winter of our discontenT\n";
    let good_hash = normlab::data::checksum::sha256_hex(good);
    let bad_hash = normlab::data::checksum::sha256_hex(bad);
    std::fs::write(dir.join("w.txt.gz"), gzip(bad)).unwrap();
    std::fs::write(dir.join("w.sha256"), format!("{good_hash}  w.txt\n")).unwrap();
    let err = Corpus::load(dir.join("w.txt.gz")).unwrap_err();
    match &err {
        DataError::ChecksumMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, &good_hash);
            assert_eq!(actual, &bad_hash);
        }
        other => panic!("expected ChecksumMismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&good_hash) && msg.contains(&bad_hash), "{msg}");
    assert!(msg.contains("w.txt.gz"), "{msg}");
}

#[test]
fn a_damaged_copy_of_the_default_corpus_is_rejected() {
    let dir = scratch("damaged");
    let src = default_corpus_path();
    let mut text = Corpus::load(&src).unwrap().bytes().to_vec();
    text[1_000_000] ^= 0x20; // flip the case of one letter
    std::fs::write(dir.join("shakespeare.txt.gz"), gzip(&text)).unwrap();
    std::fs::copy(
        src.parent().unwrap().join("shakespeare.sha256"),
        dir.join("shakespeare.sha256"),
    )
    .unwrap();
    let err = Corpus::load(dir.join("shakespeare.txt.gz")).unwrap_err();
    assert!(matches!(err, DataError::ChecksumMismatch { .. }), "{err}");
}

#[test]
fn malformed_checksum_file_is_a_typed_error() {
    let dir = scratch("malformed");
    std::fs::write(dir.join("m.txt"), b"abc").unwrap();
    std::fs::write(dir.join("m.sha256"), "not-a-hash  m.txt\n").unwrap();
    let err = Corpus::load(dir.join("m.txt")).unwrap_err();
    assert!(matches!(err, DataError::BadChecksumFile { .. }), "{err}");
    assert!(err.to_string().contains("not-a-hash"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Load errors

#[test]
fn missing_file_error_names_the_path() {
    let path = Path::new("/nonexistent/normlab/corpus.txt.gz");
    let err = Corpus::load(path).unwrap_err();
    assert!(matches!(err, DataError::NotFound { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("/nonexistent/normlab/corpus.txt.gz"),
        "{err}"
    );
}

#[test]
fn empty_corpus_plain_gz_or_in_memory_is_an_error() {
    let dir = scratch("empty");
    std::fs::write(dir.join("e.txt"), b"").unwrap();
    std::fs::write(dir.join("e2.txt.gz"), gzip(b"")).unwrap();
    for name in ["e.txt", "e2.txt.gz"] {
        let err = Corpus::load(dir.join(name)).unwrap_err();
        assert!(
            matches!(err, DataError::EmptyCorpus { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }
    assert!(matches!(
        Corpus::from_bytes("mem", Vec::new()),
        Err(DataError::EmptyCorpus { .. })
    ));
}

#[test]
fn truncated_gzip_is_an_io_error_naming_the_path() {
    let dir = scratch("truncated");
    let gz = gzip(&vec![b'x'; 10_000]);
    std::fs::write(dir.join("t.txt.gz"), &gz[..gz.len() / 2]).unwrap();
    let err = Corpus::load(dir.join("t.txt.gz")).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("t.txt.gz"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Split

#[test]
fn split_sizes_round_the_validation_part_up() {
    let c = corpus(b"0123456789");
    let s = Split::new(&c, 0.25).unwrap(); // ceil(2.5) = 3
    assert_eq!((s.len(Part::Train), s.len(Part::Val)), (7, 3));
    assert_eq!(s.bytes(Part::Train), b"0123456");
    assert_eq!(s.bytes(Part::Val), b"789");
    let s = Split::new(&c, 0.2).unwrap(); // exactly 2
    assert_eq!((s.len(Part::Train), s.len(Part::Val)), (8, 2));
    let s = Split::new(&c, 1e-9).unwrap(); // never empty
    assert_eq!(s.len(Part::Val), 1);
}

#[test]
fn bad_split_fractions_are_typed_errors() {
    let c = corpus(b"0123456789");
    for f in [0.0, 1.0, -0.1, 1.5, f64::NAN, f64::INFINITY] {
        let err = Split::new(&c, f).unwrap_err();
        assert!(
            matches!(err, DataError::BadValFraction { .. }),
            "{f}: {err}"
        );
    }
    let err = Split::new(&corpus(b"a"), 0.5).unwrap_err();
    assert!(
        matches!(err, DataError::EmptySplit { part: "train", .. }),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Batches

fn text_corpus() -> Corpus {
    let text: Vec<u8> = (0..4000u32).map(|i| b'a' + (i * 7 % 26) as u8).collect();
    corpus(&text)
}

#[test]
fn same_seed_same_batches_and_a_resumed_sampler_agrees() {
    let split = Split::new(&text_corpus(), 0.1).unwrap();
    let a = BatchSampler::new(&split, Part::Train, 8, 32, 42).unwrap();
    let first: Vec<Vec<u32>> = (0..10).map(|s| a.windows(s)).collect();
    // A new sampler (as after a restart) asked for the steps in another order.
    let b = BatchSampler::new(&split, Part::Train, 8, 32, 42).unwrap();
    for step in (0..10).rev() {
        assert_eq!(b.windows(step), first[step as usize], "step {step}");
    }
}

#[test]
fn different_step_seed_or_part_give_different_batches() {
    let split = Split::new(&text_corpus(), 0.5).unwrap();
    let a = BatchSampler::new(&split, Part::Train, 8, 32, 42).unwrap();
    let other_seed = BatchSampler::new(&split, Part::Train, 8, 32, 43).unwrap();
    let val = BatchSampler::new(&split, Part::Val, 8, 32, 42).unwrap();
    for step in 0..20 {
        assert_ne!(a.offsets(step), a.offsets(step + 1), "step {step}");
        assert_ne!(a.offsets(step), other_seed.offsets(step), "step {step}");
        assert_ne!(a.offsets(step), val.offsets(step), "step {step}");
    }
    // Rows of one batch are drawn independently, not all the same window.
    let offs = a.offsets(0);
    assert!(offs.iter().any(|&o| o != offs[0]), "{offs:?}");
}

#[test]
fn batch_tensors_are_shifted_windows_of_the_part() {
    let c = text_corpus();
    let split = Split::new(&c, 0.25).unwrap();
    let (batch, seq) = (5, 17);
    let s = BatchSampler::new(&split, Part::Val, batch, seq, 7).unwrap();
    let b = s.batch(3, &Device::Cpu).unwrap();
    assert_eq!(b.inputs.dims(), &[batch, seq]);
    assert_eq!(b.targets.dims(), &[batch, seq]);
    assert_eq!(b.inputs.dtype(), DType::U32);
    let inputs = b.inputs.to_vec2::<u32>().unwrap();
    let targets = b.targets.to_vec2::<u32>().unwrap();
    let val = split.bytes(Part::Val);
    for (row, &o) in s.offsets(3).iter().enumerate() {
        let window: Vec<u32> = val[o..o + seq + 1].iter().map(|&x| u32::from(x)).collect();
        assert_eq!(inputs[row], window[..seq]);
        assert_eq!(targets[row], window[1..]);
    }
    let w = s.windows_tensor(3, &Device::Cpu).unwrap();
    assert_eq!(w.dims(), &[batch, seq + 1]);
    assert_eq!(
        w.flatten_all().unwrap().to_vec1::<u32>().unwrap(),
        s.windows(3)
    );
    assert!(s.windows(3).iter().all(|&t| (t as usize) < VOCAB_SIZE));
}

#[test]
fn window_starts_are_roughly_uniform() {
    // A part of 6 tokens with seq 2 has 4 possible starts; 4000 draws, ~1000 each (sd ~27).
    let split = Split::new(&corpus(b"abcdefghijkl"), 0.5).unwrap();
    let s = BatchSampler::new(&split, Part::Train, 40, 2, 1).unwrap();
    let mut counts = [0u32; 4];
    for step in 0..100 {
        for o in s.offsets(step) {
            counts[o] += 1;
        }
    }
    assert!(
        counts.iter().all(|&c| (860..1140).contains(&c)),
        "{counts:?}"
    );
}

#[test]
fn batch_shape_errors_are_typed() {
    let split = Split::new(&corpus(b"0123456789"), 0.3).unwrap(); // train 7, val 3
    let err = BatchSampler::new(&split, Part::Train, 0, 2, 0).unwrap_err();
    assert!(matches!(err, DataError::ZeroBatch), "{err}");
    let err = BatchSampler::new(&split, Part::Train, 1, 0, 0).unwrap_err();
    assert!(matches!(err, DataError::ZeroSeq), "{err}");
    let err = BatchSampler::new(&split, Part::Val, 1, 3, 0).unwrap_err();
    match err {
        DataError::SeqTooLong {
            seq: 3,
            part: "val",
            len: 3,
        } => {}
        other => panic!("expected SeqTooLong, got {other:?}"),
    }
    assert!(EvalWindows::new(&split, Part::Train, 1, 7).is_err());
    // seq = len - 1: exactly one window, the whole part.
    let s = BatchSampler::new(&split, Part::Val, 4, 2, 0).unwrap();
    assert_eq!(s.offsets(9), vec![0; 4]);
    assert_eq!(s.windows(9), [7 + 48, 8 + 48, 9 + 48].repeat(4));
}

#[test]
fn eval_windows_cover_the_part_in_order() {
    let split = Split::new(&corpus(b"abcdefghijklmnopqrstu"), 0.5).unwrap(); // val: 11 tokens
    assert_eq!(split.bytes(Part::Val), b"klmnopqrstu");
    let e = EvalWindows::new(&split, Part::Val, 2, 3).unwrap();
    assert_eq!(e.num_windows(), 3); // floor(10 / 3)
    assert_eq!(e.num_batches(), 2);
    assert_eq!(e.offsets(0), vec![0, 3]);
    assert_eq!(e.offsets(1), vec![6]);
    let b0 = e.batch(0, &Device::Cpu).unwrap().unwrap();
    let inputs = b0.inputs.to_vec2::<u32>().unwrap();
    let targets = b0.targets.to_vec2::<u32>().unwrap();
    let t = |s: &str| s.bytes().map(u32::from).collect::<Vec<_>>();
    assert_eq!(inputs, vec![t("klm"), t("nop")]);
    assert_eq!(targets, vec![t("lmn"), t("opq")]);
    let b1 = e.batch(1, &Device::Cpu).unwrap().unwrap();
    assert_eq!(b1.inputs.dims(), &[1, 3]);
    assert_eq!(b1.targets.to_vec2::<u32>().unwrap(), vec![t("rst")]);
    assert!(e.batch(2, &Device::Cpu).unwrap().is_none());
    assert!(e.windows(usize::MAX).is_none());
}

// ---------------------------------------------------------------------------------------------
// Entropy

#[test]
fn entropy_of_small_texts_by_hand() {
    // "aab": p = (2/3, 1/3); H = log2 3 - 2/3 bits = ln 3 - (2/3) ln 2 nats.
    let h = unigram_entropy(b"aab").unwrap();
    assert!(
        (h.bits - (3f64.log2() - 2.0 / 3.0)).abs() < 1e-15,
        "{}",
        h.bits
    );
    assert!(
        (h.nats - (3f64.ln() - 2.0 / 3.0 * 2f64.ln())).abs() < 1e-15,
        "{}",
        h.nats
    );
    assert_eq!((h.distinct, h.tokens), (2, 3));
    // Four equiprobable symbols: exactly 2 bits, ln 4 nats.
    let h = corpus(b"abcdabcd").unigram_entropy();
    assert!(
        (h.bits - 2.0).abs() < 1e-15 && (h.nats - 4f64.ln()).abs() < 1e-15,
        "{h:?}"
    );
    // One symbol: zero, not -0 or NaN.
    let h = unigram_entropy(b"zzzz").unwrap();
    assert_eq!(h.bits.to_bits(), 0f64.to_bits());
    // All 256 byte values once: 8 bits.
    let all: Vec<u8> = (0..=255).collect();
    assert!((unigram_entropy(&all).unwrap().bits - 8.0).abs() < 1e-12);
    assert!(unigram_entropy(b"").is_none());
}

#[test]
fn split_entropy_is_per_part() {
    let split = Split::new(&corpus(b"aaaaabcd"), 0.5).unwrap(); // train "aaaa", val "abcd"
    assert_eq!(split.unigram_entropy(Part::Train).bits, 0.0);
    assert!((split.unigram_entropy(Part::Val).bits - 2.0).abs() < 1e-15);
}

// ---------------------------------------------------------------------------------------------
// Properties over shapes and seeds

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn windows_stay_inside_their_part(
        len in 2usize..300,
        frac in 0.05f64..0.95,
        batch in 1usize..9,
        seq_frac in 0.0f64..1.0,
        seed in any::<u64>(),
        step in any::<u64>(),
        val in any::<bool>(),
    ) {
        let text: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let split = match Split::new(&corpus(&text), frac) {
            Ok(s) => s,
            Err(DataError::EmptySplit { .. }) => return Ok(()),
            Err(e) => panic!("{e}"),
        };
        let part = if val { Part::Val } else { Part::Train };
        let plen = split.len(part);
        prop_assert_eq!(split.len(Part::Train) + split.len(Part::Val), len);
        let seq = 1 + ((plen as f64 - 1.0) * seq_frac) as usize;
        match BatchSampler::new(&split, part, batch, seq, seed) {
            Ok(s) => {
                prop_assert!(seq < plen);
                let offs = s.offsets(step);
                prop_assert_eq!(offs.len(), batch);
                for &o in &offs {
                    prop_assert!(o + seq < plen, "offset {} seq {} part len {}", o, seq, plen);
                }
                let w = s.windows(step);
                prop_assert_eq!(w.len(), batch * (seq + 1));
                let bytes = split.bytes(part);
                for (row, &o) in offs.iter().enumerate() {
                    for j in 0..=seq {
                        prop_assert_eq!(w[row * (seq + 1) + j], u32::from(bytes[o + j]));
                    }
                }
                prop_assert_eq!(s.windows(step), w);
            }
            Err(DataError::SeqTooLong { .. }) => prop_assert!(seq >= plen),
            Err(e) => panic!("{e}"),
        }
    }
}
