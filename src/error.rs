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
