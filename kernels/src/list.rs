//! Every kernel entry point. The names follow `src/cuda/rownorm.cu`'s X-macro:
//! `nl_<kind>_<fwd|bwd>_<f16|bf16>_<warp|block>`, the forward variants
//! `nl_<kind>_fwd_<f16|bf16>_<pure|e4m3>_<warp|block>` and `nl_finalize_<f16|bf16>`. The tests check
//! that this list, the CPU launcher's table and NVRTC's PTX entries are the same set.

use normlab_norms::{DType, NormKind};

use crate::error::{KernelError, Result};

/// 16-bit storage types the kernels are instantiated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    F16,
    BF16,
}

impl Storage {
    pub const ALL: [Storage; 2] = [Storage::F16, Storage::BF16];
    pub fn name(self) -> &'static str {
        match self {
            Storage::F16 => "f16",
            Storage::BF16 => "bf16",
        }
    }
    pub fn dtype(self) -> DType {
        match self {
            Storage::F16 => DType::F16,
            Storage::BF16 => DType::BF16,
        }
    }
    pub fn from_dtype(d: DType) -> Result<Self> {
        match d {
            DType::F16 => Ok(Storage::F16),
            DType::BF16 => Ok(Storage::BF16),
            other => Err(KernelError::UnsupportedDType(other)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Forward,
    Backward,
}

/// Thread mapping: a warp per row (short rows) or a block per row (wide rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mapping {
    Warp,
    Block,
}

/// The kernel families (the norm kinds; Top-k's k is a runtime parameter).
pub const KINDS: [&str; 6] = ["rms", "layer", "unit_l2", "l1", "linf", "topk"];

pub fn kind_name(kind: NormKind) -> &'static str {
    match kind {
        NormKind::Rms => "rms",
        NormKind::Layer => "layer",
        NormKind::UnitL2 => "unit_l2",
        NormKind::L1 => "l1",
        NormKind::LInf => "linf",
        NormKind::TopK { .. } => "topk",
    }
}

/// One row-norm kernel instantiation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelId {
    pub kind: &'static str,
    pub dir: Direction,
    pub storage: Storage,
    pub mapping: Mapping,
}

impl KernelId {
    pub fn name(&self) -> String {
        let d = match self.dir {
            Direction::Forward => "fwd",
            Direction::Backward => "bwd",
        };
        let m = match self.mapping {
            Mapping::Warp => "warp",
            Mapping::Block => "block",
        };
        format!("nl_{}_{}_{}_{}", self.kind, d, self.storage.name(), m)
    }
    /// Kernels that move rows with 16-byte vectors (all row kernels; the finalize kernel does not).
    pub fn vectorized(&self) -> bool {
        true
    }
}

/// Name of the weight/bias gradient finalize kernel for a storage type.
pub fn finalize_name(s: Storage) -> String {
    format!("nl_finalize_{}", s.name())
}

/// Every row-norm kernel.
pub fn row_kernels() -> Vec<KernelId> {
    let mut v = Vec::new();
    for storage in Storage::ALL {
        for kind in KINDS {
            for dir in [Direction::Forward, Direction::Backward] {
                for mapping in [Mapping::Warp, Mapping::Block] {
                    v.push(KernelId { kind, dir, storage, mapping });
                }
            }
        }
    }
    v
}

/// Forward variants of the row kernels (`nl::FwdVarParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FwdVariant {
    /// Statistics and outputs computed in the storage half type (normlab-norms `Accum::PureF16`
    /// for fp16 storage, `Accum::PureBf16` for bf16), with per-row counters.
    Pure,
    /// fp8 E4M3 output: `round_e4m3(y_f32 * scale)`.
    E4M3,
}

impl FwdVariant {
    pub const ALL: [FwdVariant; 2] = [FwdVariant::Pure, FwdVariant::E4M3];
    pub fn name(self) -> &'static str {
        match self {
            FwdVariant::Pure => "pure",
            FwdVariant::E4M3 => "e4m3",
        }
    }
}

/// One forward-variant kernel: `nl_<kind>_fwd_<f16|bf16>_<pure|e4m3>_<warp|block>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VariantId {
    pub kind: &'static str,
    pub storage: Storage,
    pub variant: FwdVariant,
    pub mapping: Mapping,
}

impl VariantId {
    pub fn name(&self) -> String {
        let m = match self.mapping {
            Mapping::Warp => "warp",
            Mapping::Block => "block",
        };
        format!("nl_{}_fwd_{}_{}_{}", self.kind, self.storage.name(), self.variant.name(), m)
    }
}

/// Every forward-variant kernel.
pub fn variant_kernels() -> Vec<VariantId> {
    let mut v = Vec::new();
    for storage in Storage::ALL {
        for kind in KINDS {
            for variant in FwdVariant::ALL {
                for mapping in [Mapping::Warp, Mapping::Block] {
                    v.push(VariantId { kind, storage, variant, mapping });
                }
            }
        }
    }
    v
}

/// Every entry point name (row kernels, forward variants and finalize kernels), sorted.
pub fn all_names() -> Vec<String> {
    let mut v: Vec<String> = row_kernels().iter().map(|k| k.name()).collect();
    v.extend(variant_kernels().iter().map(|k| k.name()));
    v.extend(Storage::ALL.iter().map(|&s| finalize_name(s)));
    v.sort();
    v
}

/// Every weight-projection entry point (`src/cuda/project.cu`): `nl_project_<f32|f16|bf16>`, sorted.
pub fn project_names() -> Vec<String> {
    let mut v: Vec<String> = crate::project::ProjStorage::ALL.iter().map(|s| s.kernel()).collect();
    v.sort();
    v
}

/// Every fused residual-update entry point (`src/cuda/residual.cu`), sorted:
/// `nl_update_<ngpt|angpt>_<fwd|bwd>_<f16|bf16>_<warp|block>` and `nl_update_finalize`.
pub fn update_names() -> Vec<String> {
    let mut v: Vec<String> = crate::residual::update_kernels().iter().map(|k| k.name()).collect();
    v.push(crate::residual::FINALIZE_KERNEL.to_string());
    v.sort();
    v
}

/// Every batch-norm entry point (`src/cuda/batchnorm.cu`), sorted (see `batch::plan`).
pub fn batch_names() -> Vec<String> {
    crate::batch::batch_names()
}
