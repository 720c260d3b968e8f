//! What can be benchmarked: shapes, storage dtypes, norm kinds and directions, with their
//! parsers (each refusal names the value) and the default sets.

use std::fmt;
use std::str::FromStr;

use normlab_norms::{NormKind, NormSpec};

use crate::bench::error::BenchError;

/// The shapes: `[4096 x 1024]` and `[16384 x 4096]`.
pub const FULL_SHAPES: [Shape; 2] = [Shape { rows: 4096, n: 1024 }, Shape { rows: 16384, n: 4096 }];
/// `--quick`: one small shape, so a whole run takes seconds (CI smoke test).
pub const QUICK_SHAPES: [Shape; 1] = [Shape { rows: 512, n: 1024 }];
/// Top-k's k unless told otherwise.
pub const DEFAULT_TOPK_K: usize = 8;
/// eps of every benchmarked norm (and of the candle baselines).
pub const BENCH_EPS: f64 = 1e-5;

/// A `[rows, n]` row-major tensor shape; normalization over the last axis (length `n`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub rows: usize,
    pub n: usize,
}

impl Shape {
    pub fn elems(&self) -> usize {
        self.rows * self.n
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.n)
    }
}

impl FromStr for Shape {
    type Err = BenchError;
    /// `ROWSxN`, e.g. `4096x1024`.
    fn from_str(s: &str) -> Result<Self, BenchError> {
        let bad = |why: &str| BenchError::invalid("shape", s, why);
        let (r, n) = s.trim().split_once(['x', 'X']).ok_or_else(|| bad("expected ROWSxN, e.g. 4096x1024"))?;
        let rows: usize = r.trim().parse().map_err(|_| bad("ROWS is not a positive integer"))?;
        let n: usize = n.trim().parse().map_err(|_| bad("N is not a positive integer"))?;
        if rows == 0 || n == 0 {
            return Err(bad("ROWS and N must be at least 1"));
        }
        rows.checked_mul(n).and_then(|e| e.checked_mul(8)).ok_or_else(|| bad("too many elements"))?;
        Ok(Shape { rows, n })
    }
}

/// The storage dtypes candle-nn's CPU `rms_norm`/`layer_norm` accept, so every case has its
/// baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchDType {
    F32,
    F16,
    BF16,
}

impl BenchDType {
    pub const ALL: [BenchDType; 3] = [BenchDType::F32, BenchDType::F16, BenchDType::BF16];
    pub fn name(self) -> &'static str {
        match self {
            BenchDType::F32 => "f32",
            BenchDType::F16 => "f16",
            BenchDType::BF16 => "bf16",
        }
    }
    pub fn size_bytes(self) -> usize {
        match self {
            BenchDType::F32 => 4,
            BenchDType::F16 | BenchDType::BF16 => 2,
        }
    }
}

impl fmt::Display for BenchDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BenchDType {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, BenchError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" => Ok(BenchDType::F32),
            "f16" | "fp16" | "half" => Ok(BenchDType::F16),
            "bf16" => Ok(BenchDType::BF16),
            _ => Err(BenchError::invalid("dtype", s, "expected one of f32, f16, bf16 (the dtypes candle-nn's CPU norms accept)")),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Forward,
    Backward,
}

impl Direction {
    pub const ALL: [Direction; 2] = [Direction::Forward, Direction::Backward];
    pub fn name(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
    }
    /// Tensors of the shape that must cross memory: forward reads x, writes y; backward reads
    /// x and dy, writes dx.
    pub fn tensors_moved(self) -> usize {
        match self {
            Direction::Forward => 2,
            Direction::Backward => 3,
        }
    }
    pub fn compulsory_bytes(self, shape: Shape, dtype: BenchDType) -> usize {
        self.tensors_moved() * shape.elems() * dtype.size_bytes()
    }
}

/// The norm kinds by command-line name. `topk` takes its k separately.
pub const KIND_NAMES: [&str; 6] = ["rms", "layer", "unit-l2", "l1", "linf", "topk"];

/// The spec benchmarked for a kind name: the kind's natural centring, exact constants, eps
/// [`BENCH_EPS`].
pub fn kind_spec(name: &str, topk_k: usize) -> Result<NormSpec, BenchError> {
    let kind = match name.trim().to_ascii_lowercase().as_str() {
        "rms" => NormKind::Rms,
        "layer" => NormKind::Layer,
        "unit-l2" | "unit_l2" | "unitl2" => NormKind::UnitL2,
        "l1" => NormKind::L1,
        "linf" => NormKind::LInf,
        "topk" => NormKind::TopK { k: topk_k },
        _ => return Err(BenchError::invalid("norm kind", name, format!("expected one of {}", KIND_NAMES.join(", ")))),
    };
    Ok(NormSpec::new(kind, BENCH_EPS))
}

/// A short label: the kind name, with k for top-k (`topk8`).
pub fn spec_label(spec: &NormSpec) -> String {
    match spec.kind {
        NormKind::TopK { k } => format!("topk{k}"),
        k => k.name().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_shapes() {
        assert_eq!("4096x1024".parse::<Shape>().unwrap(), Shape { rows: 4096, n: 1024 });
        assert_eq!(" 3X5 ".parse::<Shape>().unwrap(), Shape { rows: 3, n: 5 });
        for bad in ["4096", "0x5", "5x0", "ax5", "5x-1", "99999999999x99999999999"] {
            let e = bad.parse::<Shape>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn parse_dtypes_and_kinds() {
        assert_eq!("BF16".parse::<BenchDType>().unwrap(), BenchDType::BF16);
        assert!("f8e4m3".parse::<BenchDType>().unwrap_err().to_string().contains("f8e4m3"));
        for name in KIND_NAMES {
            let spec = kind_spec(name, 8).unwrap();
            spec.validate(1024).unwrap();
        }
        assert_eq!(spec_label(&kind_spec("topk", 8).unwrap()), "topk8");
        assert!(kind_spec("l3", 8).unwrap_err().to_string().contains("l3"));
    }

    #[test]
    fn compulsory_bytes() {
        let s = Shape { rows: 4096, n: 1024 };
        assert_eq!(Direction::Forward.compulsory_bytes(s, BenchDType::F32), 2 * 4096 * 1024 * 4);
        assert_eq!(Direction::Backward.compulsory_bytes(s, BenchDType::BF16), 3 * 4096 * 1024 * 2);
    }
}
