//! `vlcc_context`: a backend, its device, a thread pool and a memory cap.

use super::boundary::{fail, handle, need_out, write_out};
use super::status::vlcc_status;
use crate::backend::BackendKind;
use crate::context::Context;
use std::ffi::c_int;
use std::sync::Arc;

/// Opaque handle to a context. Shared (reference-counted): compressors and indexes made from it
/// keep it alive, so it may be freed before them. Internally synchronized: every function taking
/// a context may be called from any number of threads at once.
pub struct vlcc_context {
    _private: [u8; 0],
}

/// Backends for `vlcc_context_new`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum vlcc_backend {
    /// The best available: CUDA, then WGPU, then the CPU.
    Auto = 0,
    /// The CPU (the reference backend).
    Cpu = 1,
    /// NVIDIA GPUs through CUDA.
    Cuda = 2,
    /// Vulkan and Metal GPUs through WGPU (DX12 is not compiled in).
    Wgpu = 3,
}

pub(crate) fn backend_kind(code: u32) -> Option<BackendKind> {
    [
        BackendKind::Auto,
        BackendKind::Cpu,
        BackendKind::Cuda,
        BackendKind::Wgpu,
    ]
    .get(code as usize)
    .copied()
}

/// Borrows the context behind a handle.
pub(crate) unsafe fn context_ref<'a>(
    p: *const vlcc_context,
) -> super::boundary::FfiResult<&'a Context> {
    handle::<vlcc_context, Context>(p, "context")
}

/// A new reference to the context behind a handle.
pub(crate) unsafe fn context_arc(
    p: *const vlcc_context,
) -> super::boundary::FfiResult<Arc<Context>> {
    context_ref(p)?;
    let raw = p as *const Context;
    Arc::increment_strong_count(raw);
    Ok(Arc::from_raw(raw))
}

/// Creates a context.
///
/// - `backend`: a `vlcc_backend` value. AUTO falls back to the CPU when no GPU backend can start;
///   an explicit CUDA or WGPU that cannot start fails with VLCC_STATUS_BACKEND_UNAVAILABLE.
/// - `device`: GPU index (ignored by the CPU backend).
/// - `threads`: CPU threads for this context's pool; 0 means one per core.
/// - `out`: receives the new context, owned by the caller; free it with `vlcc_context_free`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_new(
    backend: u32,
    device: u32,
    threads: usize,
    out: *mut *mut vlcc_context,
) -> vlcc_status {
    ffi_boundary! {
        need_out(out, "out")?;
        let Some(kind) = backend_kind(backend) else {
            return fail(vlcc_status::InvalidArgument, format!("unknown backend {backend}"));
        };
        let ctx = Arc::new(Context::new(kind, device as usize, threads)?);
        write_out(out, Arc::into_raw(ctx) as *mut vlcc_context, "out")
    }
}

/// Releases the caller's reference to a context. Objects made from it keep their own. NULL is a
/// no-op. The handle must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_free(ctx: *mut vlcc_context) {
    if !ctx.is_null() {
        let _ = std::panic::catch_unwind(|| drop(Arc::from_raw(ctx as *const Context)));
    }
}

/// Stores the backend the context runs on (a `vlcc_backend` value; AUTO is resolved) in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_backend(
    ctx: *const vlcc_context,
    out: *mut u32,
) -> vlcc_status {
    ffi_boundary! {
        let c = context_ref(ctx)?;
        let code = match c.backend().kind() {
            BackendKind::Auto => vlcc_backend::Auto,
            BackendKind::Cpu => vlcc_backend::Cpu,
            BackendKind::Cuda => vlcc_backend::Cuda,
            BackendKind::Wgpu => vlcc_backend::Wgpu,
        };
        write_out(out, code as u32, "out")
    }
}

/// Stores the number of CPU threads of the context's pool in `*out`.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_threads(
    ctx: *const vlcc_context,
    out: *mut usize,
) -> vlcc_status {
    ffi_boundary! {
        let c = context_ref(ctx)?;
        write_out(out, c.threads(), "out")
    }
}

/// Caps the host memory each call made through this context allocates, in bytes (0 = no cap,
/// the default): training, encoding, adding, merging and searching check their estimate
/// (`vlcc_estimate_memory`, `vlcc_index_estimate_memory`) before they allocate, and fail with
/// VLCC_STATUS_OUT_OF_MEMORY where it does not fit, leaving every object as it was. A search
/// builds its tables and fast-scan blocks only where they fit beside its working memory, and
/// otherwise goes without them (same results, slower). Training on the CPU trains fewer
/// sub-quantizers at once where that fits, and then rebuilds the codebooks' residuals where
/// they are read rather than holding them (the same codebook, slower). The cap bounds the
/// growth of resident memory the host sees, whatever its allocator's settings: while any
/// context has one, the library's buffers of 128 KiB and more are pages of their own, returned
/// to the system when freed. A search's filter copy, the id map and serialized buffers count.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_set_memory_cap(
    ctx: *const vlcc_context,
    bytes: usize,
) -> vlcc_status {
    ffi_boundary! {
        context_ref(ctx)?.set_memory_cap(bytes);
        Ok(())
    }
}

/// With a nonzero `exact`, host searches through this context rotate every query in f32
/// products. With 0 (the default), a CPU with AVX-512 VNNI takes them in 8-bit integers where
/// the codes hold at most one bit a dimension (about 30% more queries a second on 784-d
/// Fashion-MNIST at 64 B): the rotated query is then within a bound of the exact one, which
/// moved recall@10 by at most about 0.001 where measured and which the distance bounds
/// (`vlcc_index_search_bounds`, the certified re-rank) take in; but a result near a tie can
/// differ from another CPU's. Exact rotation gives every CPU the same results up to the
/// rounding of the sums. No effect on searches scanned on a GPU (they rotate in f32).
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_set_exact_rotation(
    ctx: *const vlcc_context,
    exact: c_int,
) -> vlcc_status {
    ffi_boundary! {
        context_ref(ctx)?.set_exact_rotation(exact != 0);
        Ok(())
    }
}

/// Caps the device memory each call made through this context takes on a GPU backend, in
/// bytes (0 = no cap, the default): training, encoding, adding and searching check their
/// device estimate (the `device` figure of `vlcc_estimate_memory` and
/// `vlcc_index_estimate_memory`) before they start, and fail with VLCC_STATUS_OUT_OF_MEMORY
/// where it does not fit, leaving every object as it was. Under the cap, the buffers sized
/// from free memory (GEMM tiles, blocks of rows) are sized to fit, and training whose points
/// do not fit streams them from the host a block at a time (slower; on CUDA the same
/// codebook). On WGPU every buffer is also checked against the cap as it is made (against the
/// allocator's report, or where it gives none, the backend's count of its buffers). No
/// effect on the CPU backend.
#[no_mangle]
pub unsafe extern "C" fn vlcc_context_set_device_memory_cap(
    ctx: *const vlcc_context,
    bytes: usize,
) -> vlcc_status {
    ffi_boundary! {
        context_ref(ctx)?.set_device_memory_cap(bytes);
        Ok(())
    }
}
