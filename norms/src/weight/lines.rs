//! Matrix shape checks and the lines (rows or columns) a constraint acts on.

use rayon::prelude::*;

use crate::element::Element;
use crate::error::{NormError, Result};

/// Which lines of an `(out, in)` matrix are normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Axis {
    /// Every row (length `in`): the norm is over the input dimension.
    Rows,
    /// Every column (length `out`): the norm is over the output dimension.
    Cols,
}

impl Axis {
    /// Parses `rows`/`in`/`input` or `cols`/`out`/`output`.
    pub fn parse(s: &str) -> Result<Axis> {
        match s.to_ascii_lowercase().as_str() {
            "rows" | "row" | "in" | "input" => Ok(Axis::Rows),
            "cols" | "col" | "columns" | "out" | "output" => Ok(Axis::Cols),
            _ => Err(NormError::UnknownName { what: "axis", value: s.to_string() }),
        }
    }
}

/// The shape of a row-major `(out, in)` matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatShape {
    pub out: usize,
    pub inp: usize,
}

impl MatShape {
    pub fn new(out: usize, inp: usize) -> Self {
        MatShape { out, inp }
    }

    /// Checks `len == out * in` and that neither dimension is zero.
    pub fn check(&self, what: &'static str, len: usize) -> Result<()> {
        if self.out == 0 {
            return Err(NormError::Empty { what: "matrix output dimension", value: 0 });
        }
        if self.inp == 0 {
            return Err(NormError::Empty { what: "matrix input dimension", value: 0 });
        }
        let n = self.out.checked_mul(self.inp).ok_or_else(|| NormError::Shape(format!("{} x {} overflows usize", self.out, self.inp)))?;
        if len != n {
            return Err(NormError::Length { what, expected: n, got: len });
        }
        Ok(())
    }

    /// Number of lines along `axis` and their length.
    pub fn lines(&self, axis: Axis) -> (usize, usize) {
        match axis {
            Axis::Rows => (self.out, self.inp),
            Axis::Cols => (self.inp, self.out),
        }
    }
}

/// Applies `f` to every line of `w` along `axis` and collects its results in line order.
/// Rows are contiguous and processed in parallel; columns are gathered into a buffer, processed
/// and scattered back.
pub(crate) fn map_lines<T: Element, R: Send, F>(w: &mut [T], shape: MatShape, axis: Axis, f: F) -> Vec<R>
where
    F: Fn(&mut [T]) -> R + Sync + Send,
{
    match axis {
        Axis::Rows => w.par_chunks_mut(shape.inp).map(&f).collect(),
        Axis::Cols => {
            let mut col = vec![T::default(); shape.out];
            (0..shape.inp)
                .map(|j| {
                    for (i, c) in col.iter_mut().enumerate() {
                        *c = w[i * shape.inp + j];
                    }
                    let r = f(&mut col);
                    for (i, c) in col.iter().enumerate() {
                        w[i * shape.inp + j] = *c;
                    }
                    r
                })
                .collect()
        }
    }
}

/// Sum of squares of a line in f64 (exact widening; every square of an f32 or narrower value is
/// exact in f64, only the additions round).
pub(crate) fn sum_sq<T: Element>(line: &[T]) -> f64 {
    line.iter()
        .map(|x| {
            let v = x.to_f64();
            v * v
        })
        .sum()
}
