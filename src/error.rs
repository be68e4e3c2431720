//! The core error type. No C types here: `ffi` maps each variant to a stable status number.

use std::fmt;

/// Everything that can go wrong in the library, grouped by what the caller should do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A parameter or argument is out of range or inconsistent (k > n, d mismatch, bad metric...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Input vectors contain NaN or infinity.
    #[error("non-finite input: {0}")]
    NonFinite(String),
    /// Not enough data for the request (empty input, fewer points than anchors).
    #[error("not enough data: {0}")]
    NotEnoughData(String),
    /// The object is not in a state that allows the call (encode before train...).
    #[error("invalid state: {0}")]
    InvalidState(String),
    /// A file or buffer is not a valid vlc_compress file, or is damaged.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The file was written by an incompatible format version.
    #[error("unsupported format version {found} (this build reads {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    /// Two objects were built on different codebooks.
    #[error("codebook mismatch: {0}")]
    CodebookMismatch(String),
    /// The requested backend is not compiled in or not usable on this machine.
    #[error("backend unavailable: {0}")]
    BackendUnavailable(String),
    /// A device (GPU) reported an error.
    #[error("device error: {0}")]
    Device(String),
    /// An allocation would exceed the memory cap or failed.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// A caller's callback reported a failure (a filter returning a negative value, a fetch
    /// that gave no rows).
    #[error("callback failed: {0}")]
    Callback(String),
    /// The caller's progress callback asked the call to stop; nothing changed.
    #[error("cancelled: {0}")]
    Cancelled(String),
    /// The call's deadline (its own, or its context's timeout) passed; nothing changed.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// Operating-system I/O failure.
    #[error("i/o error: {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            context: context.to_string(),
            source,
        }
    }
}

/// A number as messages show it: whole numbers plainly, others in the shortest form that reads
/// back (`1e300`, not 301 digits).
pub(crate) fn num(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{}", v as i64)
    } else if v.is_finite() && v != 0.0 && (v.abs() >= 1e16 || v.abs() < 1e-4) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Shorthand for `Err(Error::InvalidArgument(format!(..)))`.
macro_rules! invalid {
    ($($t:tt)*) => { return Err($crate::error::Error::InvalidArgument(format!($($t)*))) };
}
pub(crate) use invalid;

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
    let over = |r: &[f32]| crate::linalg::dot(r, r) > MAX_SQUARED_NORM as f32;
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

/// `r`, with `OutOfMemory` as `None`: for callers that have a way that needs less memory.
pub(crate) fn none_if_out_of_memory<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::OutOfMemory(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reserves `n` elements, reporting allocation failure as `OutOfMemory` instead of aborting.
pub(crate) fn try_vec<T: Clone>(n: usize, fill: T, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::OutOfMemory(format!(
            "{what}: {} bytes",
            n.saturating_mul(std::mem::size_of::<T>())
        ))
    })?;
    v.resize(n, fill);
    Ok(v)
}

/// A re-rank's candidate without a raw row (on the host or the device).
pub(crate) fn raw_missing(id: u64) -> Error {
    Error::InvalidArgument(format!("raw vectors have no vector for id {id}"))
}

/// A re-rank's candidate whose raw row gives a distance that is not finite.
pub(crate) fn raw_not_finite(id: u64) -> Error {
    Error::NonFinite(format!(
        "raw vectors: the vector of id {id} has a value that is NaN or infinite, or too large \
         for its distance to the query"
    ))
}
