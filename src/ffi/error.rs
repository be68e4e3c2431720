//! Errors on their way out: the status and message of a failed call, the message kept per OS
//! thread for `vlcc_last_error_message`.

use super::status::vlcc_status;
use crate::error::Error;
use std::cell::RefCell;
use std::ffi::c_char;

/// An error on its way out: a status and the message kept for `vlcc_last_error_message`.
pub(crate) struct FfiError {
    pub status: vlcc_status,
    pub message: String,
}

pub(crate) type FfiResult<T = ()> = Result<T, FfiError>;

pub(crate) fn fail<T>(status: vlcc_status, message: impl Into<String>) -> FfiResult<T> {
    Err(FfiError {
        status,
        message: message.into(),
    })
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

pub(crate) fn set_last_error(msg: &str) {
    LAST_ERROR.with(|e| {
        let mut e = e.borrow_mut();
        e.clear();
        e.push_str(msg);
    });
}

pub(crate) fn last_error_copy() -> String {
    LAST_ERROR.with(|e| e.borrow().clone())
}

impl From<Error> for FfiError {
    fn from(e: Error) -> Self {
        FfiError {
            status: (&e).into(),
            message: e.to_string(),
        }
    }
}

/// Copies the message of the last failed call made **on this OS thread** into `buf` (at most
/// `len` bytes including the terminating NUL; truncated to fit) and stores the message's full
/// length (without NUL) in `*out_len` when `out_len` is not NULL. An empty message means the
/// last call on this thread succeeded or none failed yet. `buf` may be NULL when `len` is 0
/// (to query the length). From Go, call this on the same OS thread as the failed call
/// (`runtime.LockOSThread` around both). Always returns VLCC_STATUS_OK.
#[no_mangle]
pub unsafe extern "C" fn vlcc_last_error_message(
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> vlcc_status {
    let msg = last_error_copy();
    if !out_len.is_null() {
        *out_len = msg.len();
    }
    if !buf.is_null() && len > 0 {
        let n = msg.len().min(len - 1);
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    vlcc_status::Ok
}
