//! The parameters of a model: named candle `Var`s with the group the optimizer treats them by.
//!
//! The optimizer, the post-step projections and the checkpoints all act on these `Var`s in
//! place, so there is exactly one copy of every parameter (the nGPT authors warn that
//! projecting a copy is a common bug).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};

/// How the optimizer and the telemetry treat a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ParamGroup {
    /// 2-D weight matrices of the blocks (weight decay applies here, if any).
    Matrix,
    /// Token embedding and output head.
    Embedding,
    /// Vectors and scalars: norm gains, eigen learning rates, s_qk, s_uv, s_z.
    Scale,
}

impl ParamGroup {
    pub fn name(self) -> &'static str {
        match self {
            ParamGroup::Matrix => "matrix",
            ParamGroup::Embedding => "embedding",
            ParamGroup::Scale => "scale",
        }
    }
}

/// One named parameter.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub var: Var,
    pub group: ParamGroup,
}

/// The parameters of a model, in a fixed order (the order of creation).
#[derive(Clone, Debug, Default)]
pub struct ParamStore {
    params: Vec<Param>,
}

/// Why a parameter file could not be read into the store.
#[derive(Debug, thiserror::Error)]
pub enum ParamError {
    #[error("duplicate parameter name {0:?}")]
    Duplicate(String),
    #[error("parameter {name:?} is missing from {file}")]
    Missing { name: String, file: String },
    #[error("{file} has a tensor {name:?} that the model does not have")]
    Unexpected { name: String, file: String },
    #[error("parameter {name:?}: shape {found:?} in the file, {expected:?} in the model")]
    Shape { name: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("writing {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

impl ParamStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a parameter (names must be unique).
    pub fn push(&mut self, name: impl Into<String>, var: Var, group: ParamGroup) -> Result<(), ParamError> {
        let name = name.into();
        if self.get(&name).is_some() {
            return Err(ParamError::Duplicate(name));
        }
        self.params.push(Param { name, var, group });
        Ok(())
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Param> {
        self.params.iter()
    }

    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    pub fn len(&self) -> usize {
        self.params.len()
    }

    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// Total number of scalars.
    pub fn num_elements(&self) -> usize {
        self.params.iter().map(|p| p.var.elem_count()).sum()
    }

    /// The tensors by name (what a safetensors file holds).
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.params.iter().map(|p| (p.name.clone(), p.var.as_tensor().clone())).collect()
    }

    /// Write every parameter, in its storage dtype, to a safetensors file, atomically (a
    /// temporary file in the same directory, then a rename).
    pub fn save_safetensors(&self, path: &Path) -> Result<(), ParamError> {
        let tmp = tmp_path(path);
        candle_core::safetensors::save(&self.tensors(), &tmp)?;
        std::fs::rename(&tmp, path).map_err(|source| ParamError::Io { path: path.display().to_string(), source })
    }

    /// Read every parameter from a safetensors file into the existing `Var`s (converted to
    /// each `Var`'s dtype). The file must hold exactly the model's names with the same shapes.
    pub fn load_safetensors(&self, path: &Path, device: &Device) -> Result<(), ParamError> {
        let file = path.display().to_string();
        let tensors = candle_core::safetensors::load(path, device)?;
        for name in tensors.keys() {
            if self.get(name).is_none() {
                return Err(ParamError::Unexpected { name: name.clone(), file });
            }
        }
        for p in &self.params {
            let t = tensors.get(&p.name).ok_or_else(|| ParamError::Missing { name: p.name.clone(), file: file.clone() })?;
            if t.dims() != p.var.dims() {
                return Err(ParamError::Shape {
                    name: p.name.clone(),
                    expected: p.var.dims().to_vec(),
                    found: t.dims().to_vec(),
                });
            }
            p.var.set(&t.to_dtype(p.var.dtype())?)?;
        }
        Ok(())
    }

    /// The storage dtype of the parameters (of the first one; a model keeps them uniform
    /// except where documented).
    pub fn dtype(&self) -> Option<DType> {
        self.params.first().map(|p| p.var.dtype())
    }
}

/// `path` with `.tmp` appended, in the same directory (so the rename is atomic).
pub(crate) fn tmp_path(path: &Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    s.into()
}
