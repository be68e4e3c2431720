//! Status codes.

use crate::error::Error;
use std::ffi::c_char;

/// The result of every fallible call. Numbers are stable: they never change meaning and are
/// never reused.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_status {
    /// Success.
    Ok = 0,
    /// An argument is out of range or inconsistent (a size, a parameter value, k = 0, ...).
    InvalidArgument = 1,
    /// A required pointer argument was NULL.
    NullPointer = 2,
    /// A caller-provided output buffer is smaller than the call needs.
    BufferTooSmall = 3,
    /// A pointer is not aligned for its element type.
    Unaligned = 4,
    /// An input buffer overlaps an output buffer.
    Overlap = 5,
    /// Input vectors contain NaN or infinity.
    NonFinite = 6,
    /// Not enough data (no vectors, fewer vectors than anchors).
    NotEnoughData = 7,
    /// The object cannot do this now (encode before train, ...).
    InvalidState = 8,
    /// A file or buffer is not a valid vlc_compress file, or is damaged.
    Corrupt = 9,
    /// The file was written by an incompatible format version.
    UnsupportedVersion = 10,
    /// The objects were built on different codebooks.
    CodebookMismatch = 11,
    /// The requested backend is not compiled in or cannot start on this machine.
    BackendUnavailable = 12,
    /// A GPU reported an error.
    DeviceError = 13,
    /// Memory could not be allocated, or the context's memory cap would be exceeded.
    OutOfMemory = 14,
    /// An operating-system I/O error (open, read, write, rename).
    Io = 15,
    /// An internal error (a caught panic); the object involved should not be used further.
    Panic = 16,
    /// A callback the caller gave reported a failure; the call did nothing else.
    CallbackFailed = 17,
    /// A progress callback returned non-zero: the call stopped and left every object as it
    /// was before the call.
    Cancelled = 18,
    /// The call's deadline passed (`VLCC_SEARCH_PARAM_TIMEOUT_MS`, or the context's timeout:
    /// `vlcc_context_set_timeout`): it stopped and left every object, and every output, as
    /// it was before the call.
    TimedOut = 19,
}

impl From<&Error> for vlcc_status {
    fn from(e: &Error) -> Self {
        match e {
            Error::InvalidArgument(_) => vlcc_status::InvalidArgument,
            Error::NonFinite(_) => vlcc_status::NonFinite,
            Error::NotEnoughData(_) => vlcc_status::NotEnoughData,
            Error::InvalidState(_) => vlcc_status::InvalidState,
            Error::Corrupt(_) => vlcc_status::Corrupt,
            Error::UnsupportedVersion { .. } => vlcc_status::UnsupportedVersion,
            Error::CodebookMismatch(_) => vlcc_status::CodebookMismatch,
            Error::BackendUnavailable(_) => vlcc_status::BackendUnavailable,
            Error::Device(_) => vlcc_status::DeviceError,
            Error::OutOfMemory(_) => vlcc_status::OutOfMemory,
            Error::Io { .. } => vlcc_status::Io,
            Error::Callback(_) => vlcc_status::CallbackFailed,
            Error::Cancelled(_) => vlcc_status::Cancelled,
            Error::TimedOut(_) => vlcc_status::TimedOut,
        }
    }
}

/// A static, NUL-terminated name for `status` ("VLCC_STATUS_OK", ...); never NULL, never freed.
/// Unknown numbers give "VLCC_STATUS_UNKNOWN". Thread-safe.
#[no_mangle]
pub extern "C" fn vlcc_status_str(status: u32) -> *const c_char {
    let s: &'static [u8] = match status {
        0 => b"VLCC_STATUS_OK\0",
        1 => b"VLCC_STATUS_INVALID_ARGUMENT\0",
        2 => b"VLCC_STATUS_NULL_POINTER\0",
        3 => b"VLCC_STATUS_BUFFER_TOO_SMALL\0",
        4 => b"VLCC_STATUS_UNALIGNED\0",
        5 => b"VLCC_STATUS_OVERLAP\0",
        6 => b"VLCC_STATUS_NON_FINITE\0",
        7 => b"VLCC_STATUS_NOT_ENOUGH_DATA\0",
        8 => b"VLCC_STATUS_INVALID_STATE\0",
        9 => b"VLCC_STATUS_CORRUPT\0",
        10 => b"VLCC_STATUS_UNSUPPORTED_VERSION\0",
        11 => b"VLCC_STATUS_CODEBOOK_MISMATCH\0",
        12 => b"VLCC_STATUS_BACKEND_UNAVAILABLE\0",
        13 => b"VLCC_STATUS_DEVICE_ERROR\0",
        14 => b"VLCC_STATUS_OUT_OF_MEMORY\0",
        15 => b"VLCC_STATUS_IO\0",
        16 => b"VLCC_STATUS_PANIC\0",
        17 => b"VLCC_STATUS_CALLBACK_FAILED\0",
        18 => b"VLCC_STATUS_CANCELLED\0",
        19 => b"VLCC_STATUS_TIMED_OUT\0",
        _ => b"VLCC_STATUS_UNKNOWN\0",
    };
    s.as_ptr().cast()
}
