//! `vlcc_buffer`: bytes the library allocated (serialized codebooks and indexes).

/// A byte buffer owned by the library (a serialized codebook or index). Release it with
/// `vlcc_buffer_free`. When `len` is 0, `data` may be NULL.
#[repr(C)]
#[derive(Debug)]
pub struct vlcc_buffer {
    /// The bytes.
    pub data: *mut u8,
    /// Number of bytes.
    pub len: usize,
}

impl vlcc_buffer {
    pub(crate) fn from_vec(v: Vec<u8>) -> vlcc_buffer {
        let b = v.into_boxed_slice();
        let len = b.len();
        vlcc_buffer {
            data: Box::into_raw(b) as *mut u8,
            len,
        }
    }
}

/// Releases a library-owned buffer and sets it to `{NULL, 0}`. NULL, or a buffer already
/// released, is a no-op.
#[no_mangle]
pub unsafe extern "C" fn vlcc_buffer_free(buf: *mut vlcc_buffer) {
    if buf.is_null() {
        return;
    }
    let b = &mut *buf;
    if !b.data.is_null() {
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            b.data, b.len,
        )));
    }
    b.data = std::ptr::null_mut();
    b.len = 0;
}
