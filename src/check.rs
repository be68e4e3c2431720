//! Checks of the caller's input: whole rows, finite values, norms whose distances fit f32.

use crate::error::{invalid, Error, Result};
use crate::linalg;

/// How many `d`-d vectors `len` values make: an error for d = 0 or a partial vector.
pub(crate) fn whole_rows(len: usize, d: usize, what: &str) -> Result<usize> {
    if d == 0 {
        invalid!("dimension d = 0: must be >= 1");
    }
    if !len.is_multiple_of(d) {
        invalid!("{len} {what} are not a whole number of {d}-d vectors");
    }
    Ok(len / d)
}

/// NaN or infinite: every exponent bit set.
#[inline]
pub(crate) fn non_finite(v: f32) -> bool {
    v.to_bits() & 0x7f80_0000 == 0x7f80_0000
}

/// Fails with `NonFinite` when any value is NaN or infinite.
pub(crate) fn check_finite(x: &[f32], what: &str) -> Result<()> {
    check_finite_from(x, what, 0)
}

/// The error `check_finite` gives for `x`, once a staged copy (`stage`) has found a value
/// that is not finite in it.
pub(crate) fn non_finite_in(x: &[f32], what: &str) -> Error {
    check_finite(x, what)
        .err()
        .unwrap_or_else(|| Error::NonFinite(format!("{what}: a value is not finite")))
}

/// As `check_finite`, for values that start at position `base` of the caller's input.
pub(crate) fn check_finite_from(x: &[f32], what: &str, base: usize) -> Result<()> {
    use rayon::prelude::*;
    // A branch-free OR over each chunk vectorizes; only a chunk that fails is searched, so the
    // first bad position is reported whatever the thread count.
    let bad = |v: &f32| non_finite(*v);
    const CHUNK: usize = 1 << 14;
    let hit = x
        .par_chunks(CHUNK)
        .position_first(|c| c.iter().fold(false, |a, v| a | bad(v)));
    match hit.and_then(|ci| {
        let c = &x[ci * CHUNK..];
        c.iter().position(bad).map(|i| ci * CHUNK + i)
    }) {
        None => Ok(()),
        Some(i) => Err(Error::NonFinite(format!(
            "{what}: value {} at position {}",
            x[i],
            base + i
        ))),
    }
}

/// The largest squared norm a row may have: any distance or inner product between two such
/// rows (at most 4x this) still fits in f32, so no search or training sum overflows.
pub(crate) const MAX_SQUARED_NORM: f64 = f32::MAX as f64 / 8.0;

/// Fails with `NonFinite` when a row of `x` (rows of `d` values, finite) has a squared norm
/// over [`MAX_SQUARED_NORM`]: its distances would overflow f32 to infinity or NaN.
pub(crate) fn check_norms(x: &[f32], d: usize, what: &str) -> Result<()> {
    check_norms_from(x, d, what, 0)
}

/// As `check_norms`, for rows that start at row `base` of the caller's input.
pub(crate) fn check_norms_from(x: &[f32], d: usize, what: &str, base: usize) -> Result<()> {
    use rayon::prelude::*;
    if d == 0 {
        return Ok(());
    }
    // The f32 dot the searches use (vectorized); an overflow to infinity fails the bound too.
    let over = |r: &[f32]| linalg::dot(r, r) > MAX_SQUARED_NORM as f32;
    let norm = |r: &[f32]| r.iter().map(|&v| v as f64 * v as f64).sum::<f64>();
    match x.par_chunks(d).position_first(over) {
        None => Ok(()),
        Some(i) => {
            let r = &x[i * d..(i + 1) * d];
            let big = r.iter().fold(0f32, |m, v| m.max(v.abs()));
            Err(Error::NonFinite(format!(
                "{what}: row {} has squared norm {:.3e} (largest |value| {big:e}), over the \
                 {MAX_SQUARED_NORM:.3e} that f32 distances can hold; scale the vectors down",
                base + i,
                norm(r)
            )))
        }
    }
}
