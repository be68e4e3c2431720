//! `vlcc_compressor`: training parameters, training, and codec-mode encode/decode.

use super::boundary::{
    c_path, check_ptr, count, fail, handle, handle_mut, need_out, no_overlap, out_buf, slice,
    write_out, FfiResult,
};
use super::buffer::vlcc_buffer;
use super::context::{context_arc, vlcc_context};
use super::progress::{shared, vlcc_progress_fn};
use super::status::vlcc_status;
use crate::compressor::Compressor;
use crate::format;
use crate::params::TrainParams;
use crate::quant::Vectors;
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// Opaque handle to a compressor (parameters plus, once trained, a codebook). Owned by the
/// caller; free with `vlcc_compressor_free`. Thread rules: `set_param`, `train` and
/// `load`-style calls need exclusive access; the calls taking `const vlcc_compressor*`
/// (encode, decode, sizes, save) may run concurrently from many threads.
pub struct vlcc_compressor {
    _private: [u8; 0],
}

/// Metrics, for VLCC_PARAM_METRIC.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_metric {
    /// Squared Euclidean distance; search distances ascend.
    L2 = 0,
    /// Inner product; search distances are similarities and descend.
    InnerProduct = 1,
    /// Cosine: vectors are normalised on the way in, then inner product.
    Cosine = 2,
}

/// Training parameters for `vlcc_compressor_set_param` / `_get_param`. Values are doubles;
/// integer parameters must hold whole numbers (exact up to 2^53). Numbers are stable.
/// `vlcc_param_bounds` tells each one's range and default.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_param {
    /// Anchors (inverted lists), >= 1 and <= the number of training vectors. Default 1024.
    Anchors = 1,
    /// Bytes of residual code per vector, 1..4096. Default 16.
    BytesPerVector = 2,
    /// Bits per sub-code: 8 or 4. Default 8.
    Bits = 3,
    /// A `vlcc_metric` value. Default L2.
    Metric = 4,
    /// Residual rotation: 0 none, 1 random orthogonal, 2 learned (OPQ). Default 2 (the eigenvalue-allocation start).
    Rotation = 5,
    /// Anchor training iterations. Default 10.
    MaxIters = 6,
    /// Stop when the relative energy change is below this. Default 1e-4.
    Tol = 7,
    /// Starting temperature (0 = no annealing). Default 1.
    InitialTemp = 8,
    /// Temperature multiplier per iteration, in (0, 1]. Default 0.9.
    CoolingRate = 9,
    /// Trimmed fraction of each anchor's farthest points at the starting temperature, [0, 0.5).
    /// Default 0.05.
    Trim = 10,
    /// Load-balancing strength at the starting temperature, >= 0. Default 0.3.
    Balance = 11,
    /// Merge/split/re-seat every this many iterations (0 = never). Default 5.
    MaintenanceInterval = 12,
    /// Merge anchors closer than this times their radius, >= 0. Default 0.05.
    MergeThreshold = 13,
    /// Split anchors holding more than this times the mean load, > 1. Default 2.
    SplitFactor = 14,
    /// Training vectors used per anchor (0 = all). Default 128.
    MaxPointsPerAnchor = 15,
    /// Random seed. Default 24301.
    Seed = 16,
    /// Lloyd iterations per PQ sub-codebook, >= 1. Default 25.
    PqIters = 17,
    /// Training vectors for the PQ sub-codebooks (0 = all). Default 65536.
    PqTrainPoints = 18,
    /// Alternations of the learned rotation after its eigenvalue-allocation start (0 = that
    /// start alone, about a tenth of the time). Default 0.
    OpqIters = 19,
    /// Anchor initialisation: 0 k-means++, 1 a seeded sample. Default 1.
    Init = 20,
    /// Training vectors the learned rotation is fitted on (0 = all of the PQ sample).
    /// Default 65536.
    OpqTrainPoints = 21,
    /// Anchor-assignment distances on GPU backends: 0 fp32, 1 TF32 tensor cores with near ties
    /// re-checked in fp32 wherever no balancing bias is on (the final anchors are fp32 means
    /// of fp32 assignments; faster on large sets; CUDA only). Default 0.
    Precision = 22,
    /// The last sub-code of each code (a byte, or a nibble at 4 bits) names the squared error
    /// of the rest, which L2 search adds to each code's distance: 0 auto (on for L2 with at
    /// least 8 dimensions per byte of code), 1 off, 2 on (L2 only). Default 0.
    ErrorCode = 23,
}

pub(crate) unsafe fn compressor_ref<'a>(p: *const vlcc_compressor) -> FfiResult<&'a Compressor> {
    handle::<vlcc_compressor, Compressor>(p, "compressor")
}

pub(crate) unsafe fn compressor_mut<'a>(p: *mut vlcc_compressor) -> FfiResult<&'a mut Compressor> {
    handle_mut::<vlcc_compressor, Compressor>(p, "compressor")
}

fn boxed(c: Compressor) -> *mut vlcc_compressor {
    Box::into_raw(Box::new(c)) as *mut vlcc_compressor
}

/// Creates an untrained compressor with default parameters on `ctx` (which it keeps alive).
/// `*out` receives it, owned by the caller; free with `vlcc_compressor_free`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_new(
    ctx: *const vlcc_context,
    out: *mut *mut vlcc_compressor,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let ctx = context_arc(ctx)?;
        write_out(out, boxed(Compressor::new(ctx, TrainParams::default())), "out")
    }
}

/// Frees a compressor. NULL is a no-op. Indexes made from it stay valid.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_free(c: *mut vlcc_compressor) {
    if !c.is_null() {
        let _ = std::panic::catch_unwind(|| drop(Box::from_raw(c as *mut Compressor)));
    }
}

/// Sets a training parameter (a `vlcc_param` value). Sticky until changed; takes effect at the
/// next `vlcc_compressor_train`. An unknown parameter or a value out of range fails with
/// VLCC_STATUS_INVALID_ARGUMENT and leaves every parameter unchanged. Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_set_param(
    c: *mut vlcc_compressor,
    param: u32,
    value: f64,
) -> vlcc_status {
    ffi_boundary! {
        Ok(compressor_mut(c)?.params_mut().set(param, value)?)
    }
}

/// Stores the current value of a training parameter in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_get_param(
    c: *const vlcc_compressor,
    param: u32,
    out: *mut f64,
) -> vlcc_status {
    ffi_boundary! {
        let v = compressor_ref(c)?.params().get(param)?;
        write_out(out, v, "out")
    }
}

/// Stores what parameter `param` accepts and its default: `*min` and `*max` are the smallest
/// and largest values `vlcc_compressor_set_param` takes (both included; bits also needs 4 or
/// 8, and anchors at most the training vectors), `*is_whole` is 1 where only whole numbers
/// are taken. Any output may be NULL. An unknown parameter fails with INVALID_ARGUMENT.
/// Thread-safe.
#[no_mangle]
pub unsafe extern "C" fn vlcc_param_bounds(
    param: u32,
    min: *mut f64,
    max: *mut f64,
    default_value: *mut f64,
    is_whole: *mut u32,
) -> vlcc_status {
    ffi_boundary! {
        let p = crate::params::param(param)?;
        for (out, v) in [(min, p.min), (max, p.max), (default_value, p.default)] {
            if !out.is_null() {
                write_out(out, v, "bounds")?;
            }
        }
        if !is_whole.is_null() {
            write_out(is_whole, p.whole as u32, "is_whole")?;
        }
        Ok(())
    }
}

/// Trains a codebook on `n` vectors of dimension `d` (`x` holds n*d floats, row-major; it is not
/// kept). Replaces any previous codebook only on success. Fails with NOT_ENOUGH_DATA when n is 0
/// or smaller than the anchor count, NON_FINITE on NaN/inf, INVALID_ARGUMENT on d = 0.
/// Exclusive access.
/// Reports to the progress callback (`vlcc_compressor_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the compressor as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_train(
    c: *mut vlcc_compressor,
    x: *const f32,
    n: usize,
    d: usize,
) -> vlcc_status {
    ffi_watched! {
        let c = compressor_mut(c)?;
        let x = slice(x, count(n, d, "vectors")?, "x")?;
        c.train(x, d)?;
        Ok(())
    }
}

/// Stores the vector dimension of the trained codebook in `*out` (INVALID_STATE if untrained).
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_dim(
    c: *const vlcc_compressor,
    out: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        let d = compressor_ref(c)?.codebook()?.dim();
        write_out(out, d, "out")
    }
}

/// Stores the bytes per vector of a standalone code (anchor id + residual code) in `*out`:
/// `vlcc_compressor_encode` writes `n * codec_size` bytes (an index stores the residual code
/// alone: `vlcc_index_info.residual_code_size`). INVALID_STATE if untrained.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_codec_size(
    c: *const vlcc_compressor,
    out: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        let s = compressor_ref(c)?.codebook()?.codec_size();
        write_out(out, s, "out")
    }
}

/// Stores the codebook's fingerprint (a hash of its contents) in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_fingerprint(
    c: *const vlcc_compressor,
    out: *mut u64,
) -> vlcc_status {
    ffi_boundary! {
        let f = compressor_ref(c)?.codebook()?.fingerprint();
        write_out(out, f, "out")
    }
}

/// What the last training measured.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct vlcc_train_report {
    /// Mean squared distance of the training vectors to their nearest anchor.
    pub energy: f64,
    /// Largest anchor load over the mean load.
    pub max_list_over_mean: f64,
    /// Anchor iterations run.
    pub iterations: u64,
    /// Seconds spent on anchors and on the residual codebooks.
    pub seconds: f64,
}

/// Stores the report of the last successful `vlcc_compressor_train` in `*out` (INVALID_STATE if
/// the compressor was not trained by this handle, e.g. loaded from a file).
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_train_report(
    c: *const vlcc_compressor,
    out: *mut vlcc_train_report,
) -> vlcc_status {
    ffi_boundary! {
        let Some(r) = compressor_ref(c)?.report() else {
            return fail(vlcc_status::InvalidState, "no training report: the compressor was not trained here");
        };
        let rep = vlcc_train_report {
            energy: r.energy,
            max_list_over_mean: r.max_list_over_mean,
            iterations: r.iterations as u64,
            seconds: r.anchor_seconds + r.pq_seconds,
        };
        write_out(out, rep, "out")
    }
}

/// Writes the codes `encode` makes of `n` vectors into `out`, which is checked first to hold
/// them (`encode` sees it, to check its input against it); nothing is written on error.
unsafe fn codes_into(
    c: *const vlcc_compressor,
    n: usize,
    out: *mut u8,
    out_len: usize,
    encode: impl FnOnce(&Compressor, &[u8]) -> FfiResult<Vec<u8>>,
) -> FfiResult {
    let c = compressor_ref(c)?;
    let need = count(n, c.codebook()?.codec_size(), "codes")?;
    let dst = out_buf(out, out_len, need, "out")?;
    let codes = encode(c, dst)?;
    dst.copy_from_slice(&codes);
    Ok(())
}

unsafe fn encode_into(
    c: *const vlcc_compressor,
    x: Vectors<'_>,
    n: usize,
    out: *mut u8,
    out_len: usize,
) -> FfiResult {
    codes_into(c, n, out, out_len, |c, dst| {
        let src: &[u8] = match x {
            Vectors::F32(v) => bytemuck::cast_slice(v),
            Vectors::F16(v) => bytemuck::cast_slice(v),
        };
        no_overlap(src, dst, "input vectors and output codes")?;
        Ok(c.encode(x)?)
    })
}

/// Encodes `n` vectors (`x`: n*d floats, d = the codebook's dimension) into `out`, which must hold
/// `out_len >= n * codec_size` bytes (`vlcc_compressor_codec_size`); nothing is written on error.
/// `x` and `out` must not overlap. May run concurrently with other const calls.
/// Reports to the progress callback (`vlcc_compressor_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the compressor as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_encode(
    c: *const vlcc_compressor,
    x: *const f32,
    n: usize,
    out: *mut u8,
    out_len: usize,
) -> vlcc_status {
    ffi_watched! {
        let d = compressor_ref(c)?.codebook()?.dim();
        let x = slice(x, count(n, d, "vectors")?, "x")?;
        encode_into(c, Vectors::F32(x), n, out, out_len)
    }
}

/// Like `vlcc_compressor_encode` for IEEE half-precision input (`x`: n*d binary16 values).
/// Reports to the progress callback (`vlcc_compressor_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the compressor as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_encode_f16(
    c: *const vlcc_compressor,
    x: *const u16,
    n: usize,
    out: *mut u8,
    out_len: usize,
) -> vlcc_status {
    ffi_watched! {
        let d = compressor_ref(c)?.codebook()?.dim();
        let x = slice(x, count(n, d, "vectors")?, "x")?;
        encode_into(c, Vectors::F16(bytemuck::cast_slice(x)), n, out, out_len)
    }
}

/// Like `vlcc_compressor_encode` for vectors already in CUDA device memory, read in place: `x`
/// is a device pointer (`cudaMalloc`, `cudaMallocManaged`, `cuMemAlloc`, a framework's GPU
/// tensor) to n*d floats on the device of the compressor's context, which must run on the
/// CUDA backend (else BACKEND_UNAVAILABLE). Only the codes cross to the host, into `out` (host
/// memory, `out_len >= n * codec_size` bytes). A range that is not device or managed memory of
/// that device (a host pointer, another device's memory, freed or too short) is
/// INVALID_ARGUMENT, checked before anything is read; NaN or infinity is NON_FINITE. Nothing
/// may write `x` while the call runs; nothing is written to `out` on error.
/// Reports to the progress callback (`vlcc_compressor_set_progress`, else the context's); a cancel
/// returns VLCC_STATUS_CANCELLED and leaves the compressor as it was.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_encode_device(
    c: *const vlcc_compressor,
    x: *const f32,
    n: usize,
    out: *mut u8,
    out_len: usize,
) -> vlcc_status {
    ffi_watched! {
        let len = count(n, compressor_ref(c)?.codebook()?.dim(), "vectors")?;
        codes_into(c, n, out, out_len, |c, _| {
            if n == 0 {
                crate::backend::need_device_memory(
                    c.context().backend(),
                    "encoding from device memory",
                )?;
                return Ok(Vec::new());
            }
            check_ptr(x, len, "x")?;
            // SAFETY: the caller vouches that nothing writes the vectors meanwhile; the
            // backend checks the range before reading it.
            Ok(unsafe { c.encode_device(x as u64, n) }?)
        })
    }
}

/// Decodes `n` codes (`codes`: n * codec_size bytes) into approximate vectors in `out`, which must
/// hold `out_len >= n * d` floats. Nothing is written on error (corrupt anchor ids fail with
/// INVALID_ARGUMENT). `codes` and `out` must not overlap.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_decode(
    c: *const vlcc_compressor,
    codes: *const u8,
    n: usize,
    out: *mut f32,
    out_len: usize,
) -> vlcc_status {
    ffi_boundary! {
        let comp = compressor_ref(c)?;
        let cb = comp.codebook()?;
        let codes = slice(codes, count(n, cb.codec_size(), "codes")?, "codes")?;
        let dst = out_buf(out, out_len, count(n, cb.dim(), "vectors")?, "out")?;
        no_overlap(codes, dst, "input codes and output vectors")?;
        let x = comp.decode(codes)?;
        dst.copy_from_slice(&x);
        Ok(())
    }
}

/// Saves the trained codebook to `path` (UTF-8), atomically: a temporary file is written,
/// synced and renamed, so `path` holds the old file or the new one, never a partial one. A
/// path that exists and is not a regular file (a directory, a FIFO, a device such as
/// /dev/null) fails with VLCC_STATUS_INVALID_ARGUMENT and is left as it is; a directory that
/// cannot be written to with VLCC_STATUS_IO.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_save_codebook(
    c: *const vlcc_compressor,
    path: *const c_char,
) -> vlcc_status {
    ffi_boundary! {
        let cb = compressor_ref(c)?.codebook()?;
        format::save_codebook(cb, c_path(path, "path")?)?;
        Ok(())
    }
}

/// Loads a codebook (from a codebook or index file) into a new trained compressor on `ctx`.
/// `*out` receives it, owned by the caller. Corrupt or truncated files fail with
/// VLCC_STATUS_CORRUPT; a path that is not a regular file (a directory, a FIFO, a device) with
/// VLCC_STATUS_INVALID_ARGUMENT naming what it is, found without blocking; a missing or
/// unreadable file with VLCC_STATUS_IO.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_load_codebook(
    ctx: *const vlcc_context,
    path: *const c_char,
    out: *mut *mut vlcc_compressor,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let ctx = context_arc(ctx)?;
        let cb = format::load_codebook(c_path(path, "path")?)?;
        write_out(out, boxed(Compressor::with_codebook(ctx, Arc::new(cb))), "out")
    }
}

/// Serializes the trained codebook into a library-owned buffer (the same bytes as its file);
/// release it with `vlcc_buffer_free`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_serialize_codebook(
    c: *const vlcc_compressor,
    out: *mut vlcc_buffer,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let bytes = format::codebook_bytes(compressor_ref(c)?.codebook()?);
        write_out(out, vlcc_buffer::from_vec(bytes), "out")
    }
}

/// Builds a trained compressor on `ctx` from `len` bytes of a serialized codebook (or index).
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_deserialize_codebook(
    ctx: *const vlcc_context,
    data: *const u8,
    len: usize,
    out: *mut *mut vlcc_compressor,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let ctx = context_arc(ctx)?;
        let cb = format::read_codebook_bytes(slice(data, len, "data")?)?;
        write_out(out, boxed(Compressor::with_codebook(ctx, Arc::new(cb))), "out")
    }
}

/// Copies the trained anchors (the inverted lists' centroids, `anchors x d` floats, row-major)
/// into `out`, which must hold `len >= anchors * d` floats; stores the anchor count in
/// `*out_anchors`. With `out` NULL and `len` 0 it only stores the count.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_anchors(
    c: *const vlcc_compressor,
    out: *mut f32,
    len: usize,
    out_anchors: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out_anchors, "out_anchors")?;
        let cb = compressor_ref(c)?.codebook()?;
        if !(out.is_null() && len == 0) {
            let a = cb.anchor_vectors();
            out_buf(out, len, a.len(), "out")?.copy_from_slice(a);
        }
        write_out(out_anchors, cb.anchors(), "out_anchors")
    }
}

/// As `vlcc_context_set_progress`, for this compressor's train and encode calls only (it
/// takes precedence over the context's). Exclusive access.
#[no_mangle]
pub unsafe extern "C" fn vlcc_compressor_set_progress(
    c: *mut vlcc_compressor,
    f: vlcc_progress_fn,
    user: *mut c_void,
) -> vlcc_status {
    ffi_boundary! {
        compressor_mut(c)?.set_progress(shared(f, user));
        Ok(())
    }
}
