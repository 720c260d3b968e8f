//! Reading candle CPU storages as row-major element slices, and dispatching on the dtype.
//!
//! candle hands a custom op a storage and a [`Layout`] with arbitrary strides and offset.
//! The norm kernels want a dense `[rows, n]` slice, so [`read`] borrows the storage when the
//! layout is contiguous (at any offset, e.g. a `narrow` of the leading dims) and gathers a
//! row-major copy otherwise (a transpose, a broadcast gradient with stride 0).

use std::borrow::Cow;

use candle_core::{CpuStorage, DType, Layout, Result, WithDType};

use crate::ops::error::OpsError;

/// The elements of `storage` under `layout`, in row-major order of the layout's shape.
pub(crate) fn read<'a, T: WithDType>(what: &'static str, storage: &'a CpuStorage, layout: &Layout) -> Result<Cow<'a, [T]>> {
    let data = storage.as_slice::<T>()?;
    let len = data.len();
    if let Some((start, end)) = layout.contiguous_offsets() {
        return data.get(start..end).map(Cow::Borrowed).ok_or_else(|| OpsError::Layout { what, offset: end, len }.into());
    }
    let dims = layout.dims();
    let strides = layout.stride();
    let count = layout.shape().elem_count();
    let mut out = Vec::with_capacity(count);
    if count == 0 {
        return Ok(Cow::Owned(out));
    }
    // Odometer over the multi-index; `off` follows it through the strides.
    let mut idx = vec![0usize; dims.len()];
    let mut off = layout.start_offset();
    loop {
        out.push(*data.get(off).ok_or(OpsError::Layout { what, offset: off, len })?);
        let mut d = dims.len();
        loop {
            if d == 0 {
                return Ok(Cow::Owned(out));
            }
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < dims[d] {
                break;
            }
            off -= strides[d] * dims[d];
            idx[d] = 0;
        }
    }
}

/// The dtypes the ops accept: the candle dtypes with a `normlab_norms::Element` twin.
pub(crate) fn check_supported(dtype: DType) -> std::result::Result<(), OpsError> {
    match dtype {
        DType::F64 | DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        dtype => Err(OpsError::UnsupportedDType { dtype }),
    }
}

/// Run `$body` with the type alias `$T` bound to the element type of the candle dtype.
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            candle_core::DType::F64 => {
                type $T = f64;
                $body
            }
            candle_core::DType::F32 => {
                type $T = f32;
                $body
            }
            candle_core::DType::F16 => {
                type $T = half::f16;
                $body
            }
            candle_core::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            dtype => Err(crate::ops::error::OpsError::UnsupportedDType { dtype }.into()),
        }
    };
}
pub(crate) use with_dtype;
