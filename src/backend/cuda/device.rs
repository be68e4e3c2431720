//! Device plumbing: the context, its stream and kernels, page-locked staging, the memory pool.

use super::*;

pub(super) struct Kernels {
    pub(super) row_norms: CudaFunction,
    pub(super) offsets: CudaFunction,
    pub(super) argmin_rows: CudaFunction,
    pub(super) split_f16: CudaFunction,
    pub(super) count_energy: CudaFunction,
    pub(super) scatter: CudaFunction,
    pub(super) update_means: CudaFunction,
    /// `update_means` in three steps, for points streamed a block at a time.
    pub(super) trim_cuts: CudaFunction,
    pub(super) add_kept: CudaFunction,
    pub(super) finish_means: CudaFunction,
    /// PQ assignment for sub-vectors of up to 8, 16 and 32 dimensions (widths without a
    /// kernel of their own in `pq_exact`).
    pub(super) pq_assign: [CudaFunction; 3],
    /// One per width of `PQ_EXACT`.
    pub(super) pq_exact: Vec<CudaFunction>,
    pub(super) residuals: CudaFunction,
    pub(super) error_levels: CudaFunction,
    pub(super) first_non_finite: CudaFunction,
    pub(super) unit_rows: CudaFunction,
    pub(super) coarse_probe: CudaFunction,
    pub(super) query_tables: CudaFunction,
    pub(super) scan_lists: CudaFunction,
    pub(super) merge_candidates: CudaFunction,
    pub(super) range_lists: CudaFunction,
    /// Exact re-rank: any rows, and rows of whole float4s.
    pub(super) rerank_rows: [CudaFunction; 2],
}

/// What one context owns on the device. One lock: cuBLAS handles and launches are not
/// meant to be shared across threads without it.
pub(super) struct Device {
    pub(super) stream: Arc<CudaStream>,
    /// Uploads that overlap the kernels of `stream` (encoding).
    pub(super) copy: Arc<CudaStream>,
    pub(super) blas: CudaBlas,
    pub(super) k: Kernels,
    /// Page-locked buffers for large uploads, made on first use.
    pub(super) staging: Option<Staging>,
}

/// Floats per staging buffer (32 MB).
pub(super) const STAGE: usize = 8 << 20;
/// Blocks in flight in a staged upload or an encoding: with two, one slow fill or kernel
/// stalled the other side (notes/perf-cuda.md, encoding version 11).
pub(super) const BUFS: usize = 3;

/// `BUFS` page-locked buffers: the host fills one while others are copied to the device.
/// Pageable uploads run at about a third of the bus speed.
pub(super) struct Staging {
    pub(super) bufs: [PinnedHostSlice<f32>; BUFS],
    /// The copies out of `bufs`: each must end before the host refills its buffer.
    pub(super) sent: [Option<CudaEvent>; BUFS],
    /// The copies into `back` (encoding), with the kernels before them.
    pub(super) done: [Option<CudaEvent>; BUFS],
    /// Page-locked buffers for what comes back per block (encoding), grown on demand: copies
    /// into pageable memory fault its pages in one by one, at a fraction of the bus speed.
    pub(super) back: Option<[PinnedHostSlice<u8>; BUFS]>,
}

/// `BUFS` page-locked buffers of `len` values. `flags`: write-combined for memory the host only
/// writes (the device reads it without snooping the host's caches); 0 (cached) for memory
/// the host reads, which write-combined memory would serve uncached.
pub(super) fn pinned_bufs<T: DeviceRepr>(
    ctx: &Arc<CudaContext>,
    len: usize,
    flags: u32,
) -> Result<[PinnedHostSlice<T>; BUFS]> {
    per_buf(|| {
        // SAFETY: page-locked host memory, written (by the host or a copy) before every read.
        unsafe { ctx.alloc_pinned_with_flags(len, flags) }
            .map_err(|e| dev_err("allocate page-locked memory", e))
    })
}

/// One `make()` per buffer in flight.
pub(super) fn per_buf<T>(mut make: impl FnMut() -> Result<T>) -> Result<[T; BUFS]> {
    let all = (0..BUFS).map(|_| make()).collect::<Result<Vec<_>>>()?;
    Ok(all
        .try_into()
        .unwrap_or_else(|_| unreachable!("BUFS values")))
}

impl Device {
    /// Makes the context current on this thread (`CudaBackend::bind` says when that matters).
    pub(super) fn bind(&self) -> Result<()> {
        let ctx = self.stream.context();
        ctx.bind_to_thread().map_err(|e| dev_err("bind context", e))
    }

    /// The staging buffers, made on first use; `None` where page-locked memory cannot be had.
    pub(super) fn staging(&mut self) -> Option<&mut Staging> {
        if self.staging.is_none() {
            self.staging = Staging::new(self.stream.context());
        }
        self.staging.as_mut()
    }
}

impl Staging {
    /// `None` where page-locked memory cannot be had.
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Option<Staging> {
        Some(Staging {
            bufs: pinned_bufs(
                ctx,
                STAGE,
                cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED,
            )
            .ok()?,
            sent: Default::default(),
            done: Default::default(),
            back: None,
        })
    }

    /// `src` copied into buffer `b` once the buffer's last copy out has ended, every value
    /// checked on the way (the caller's input needs no pass of its own): the filled part, or
    /// `None` where a value is NaN or infinite.
    pub(super) fn fill(&mut self, b: usize, src: &[f32]) -> Result<Option<&[f32]>> {
        Staging::fill_buf(&mut self.sent[b], &mut self.bufs[b], src)
    }

    /// `fill` on one buffer and the event of its last copy out.
    pub(super) fn fill_buf<'a>(
        sent: &mut Option<CudaEvent>,
        buf: &'a mut PinnedHostSlice<f32>,
        src: &[f32],
    ) -> Result<Option<&'a [f32]>> {
        if let Some(e) = sent.take() {
            e.synchronize().map_err(|e| dev_err("upload", e))?;
        }
        let host = buf.as_mut_slice().map_err(|e| dev_err("upload", e))?;
        let host = &mut host[..src.len()];
        Ok(crate::stage::stage(host, src).then_some(&*host))
    }

    /// `take_back` of return buffer `b`.
    pub(super) fn take_back(
        &mut self,
        b: usize,
        span: (usize, usize),
        ids: &mut [u32],
        idx: &mut [u8],
    ) -> Result<()> {
        let back = &self.back.as_ref().expect("made before the blocks")[b];
        take_back(&mut self.done[b], back, span, ids, idx)
    }

    /// The return buffers, at least `len` bytes each. Callers wait on `done` first.
    pub(super) fn back(
        &mut self,
        ctx: &Arc<CudaContext>,
        len: usize,
    ) -> Result<&mut [PinnedHostSlice<u8>; BUFS]> {
        if self.back.as_ref().is_none_or(|b| b[0].len() < len) {
            self.back = None;
            self.back = Some(pinned_bufs(ctx, len, 0)?);
        }
        Ok(self.back.as_mut().expect("the buffers were just made"))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Copies still reading the buffers must end before the memory is released.
        for e in self.sent.iter().chain(&self.done).flatten() {
            let _ = e.synchronize();
        }
    }
}

/// The memory pool `CudaStream::alloc` takes from (stream-ordered allocation), where the
/// device has one.
pub(super) fn device_pool(ctx: &CudaContext) -> Option<cudarc::driver::sys::CUmemoryPool> {
    if !ctx.has_async_alloc() {
        return None;
    }
    // SAFETY: the context's own device.
    unsafe { cudarc::driver::result::device::get_mem_pool(ctx.cu_device()) }.ok()
}

/// Lets the device's memory pool keep what is freed instead of handing it back at every
/// synchronization: a session's large buffers (points, their split, dots blocks) then come
/// from the pool in the next session instead of being mapped again, at several ms per GB.
/// `CudaBackend`'s drop hands back what the pool holds.
pub(super) fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    use cudarc::driver::{result, sys::CUmemPool_attribute};
    let Some(pool) = device_pool(ctx) else {
        return Ok(());
    };
    let mut keep = u64::MAX;
    // SAFETY: a live pool; the attribute is a u64.
    unsafe {
        result::mem_pool::set_attribute(
            pool,
            CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut keep as *mut u64).cast(),
        )
    }
    .map_err(|e| dev_err("memory pool", e))
}

/// A u64 attribute of a memory pool (`CU_MEMPOOL_ATTR_*_MEM_*`), or the driver's error.
pub(super) fn pool_attribute(
    pool: cudarc::driver::sys::CUmemoryPool,
    attribute: cudarc::driver::sys::CUmemPool_attribute,
) -> Result<u64> {
    let mut v = 0u64;
    // SAFETY: a live pool; the attributes read through here are u64.
    unsafe {
        cudarc::driver::result::mem_pool::get_attribute(
            pool,
            attribute,
            (&mut v as *mut u64).cast(),
        )
    }
    .map_err(|e| dev_err("memory pool", e))?;
    Ok(v)
}

/// Device memory in use from the pool (0 where the device has none).
pub(super) fn pool_used(ctx: &CudaContext) -> usize {
    use cudarc::driver::sys::CUmemPool_attribute as A;
    device_pool(ctx)
        .and_then(|pool| pool_attribute(pool, A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT).ok())
        .map_or(0, |v| v as usize)
}

/// Free device memory, counting what the pool holds unused (it serves our next allocations
/// first).
pub(super) fn free_bytes(ctx: &CudaContext) -> usize {
    use cudarc::driver::sys::CUmemPool_attribute as A;
    let free = ctx.mem_get_info().map_or(0, |(f, _)| f);
    let Some(pool) = device_pool(ctx) else {
        return free;
    };
    let get = |a| pool_attribute(pool, a).unwrap_or(0);
    let idle = get(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
        .saturating_sub(get(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
    free + idle as usize
}
