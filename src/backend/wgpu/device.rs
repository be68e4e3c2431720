//! Device plumbing: shader modules and pipelines, buffers and uploads, submissions and
//! read-backs, bind groups and parameter blocks.

use super::*;

/// A device buffer, counted in its backend's bytes in use until the device is done with it:
/// what the device cap is checked against where the allocator gives no report (Metal).
#[derive(Clone, Debug)]
pub(crate) struct Buf {
    raw: wgpu::Buffer,
    _held: Arc<Held>,
}

#[derive(Debug)]
struct Held {
    bytes: usize,
    count: Arc<Count>,
}

/// Bytes of a backend's buffers: held, and dropped while work submitted before may still
/// use them (their memory is freed once that work is done).
#[derive(Debug)]
pub(super) struct Count {
    held: AtomicUsize,
    dropped: AtomicUsize,
}

impl Count {
    /// wgpu's own buffer on every device: 512 KiB of zeros for clears.
    pub(super) fn new() -> Count {
        Count {
            held: AtomicUsize::new(512 << 10),
            dropped: AtomicUsize::new(0),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.count.dropped.fetch_add(self.bytes, Ordering::Relaxed);
    }
}

impl std::ops::Deref for Buf {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.raw
    }
}

/// Kernel file `name` built for this adapter: the constants its limits set, then `extra`
/// (constants per codebook or index shape) over them.
pub(super) fn module(
    device: &wgpu::Device,
    limits: &wgpu::Limits,
    checks: ShaderChecks,
    name: &str,
    extra: &[(&str, u32)],
) -> Result<wgpu::ShaderModule> {
    module_of(device, limits, checks, name, kernel(name), extra)
}

/// The source of kernel file `name`.
pub(super) fn kernel(name: &str) -> &'static str {
    KERNELS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
        .expect("every kernel file is listed")
}

/// `module` for the text `src` (a kernel file, or one changed for a test).
pub(super) fn module_of(
    device: &wgpu::Device,
    limits: &wgpu::Limits,
    checks: ShaderChecks,
    name: &str,
    src: &str,
    extra: &[(&str, u32)],
) -> Result<wgpu::ShaderModule> {
    let mut s = with_const(src, "WG", workgroup_size(limits));
    s = with_const(&s, "BOOK", book_floats(limits) as u32);
    s = with_const(&s, "TK", dots_step(limits));
    for (c, v) in extra {
        s = with_const(&s, c, *v);
    }
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(s.into()),
    };
    // SAFETY: short of `all` (`runtime_checks`), every loop of these kernels ends (each counts
    // up to a bound taken from its parameters) and no division is by zero (divisors are
    // constants or checked sizes); without `bounds`, every index they make is in range (the
    // host sizes each dispatch and binding; tests/wgpu.rs runs them against the CPU).
    scoped(device, || unsafe {
        device.create_shader_module_trusted(desc, runtime_checks(checks))
    })
}

/// What wgpu adds to the kernels' code. By default nothing: its index clamps, loop counters
/// and division guards cost 6-8% of training, 15% of encoding and 25% of search on an H100
/// (notes/perf-wgpu.md, version 26), and storage buffers stay bounded by the driver where it
/// has robust buffer access. `ShaderChecks::All` restores wgpu's default; `Bounds` keeps
/// the index clamps only.
pub(super) fn runtime_checks(checks: ShaderChecks) -> wgpu::ShaderRuntimeChecks {
    let mut c = wgpu::ShaderRuntimeChecks::checked();
    match checks {
        ShaderChecks::All => return c,
        ShaderChecks::Bounds => {}
        ShaderChecks::Off => c.bounds_checks = false,
    }
    c.force_loop_bounding = false;
    c.int_div_checks = false;
    c
}

/// The pipeline cached under `key`, built on first use.
pub(super) fn cached<K: PartialEq + Copy, T>(
    cache: &Mutex<Vec<(K, Arc<T>)>>,
    key: K,
    build: impl FnOnce() -> Result<T>,
) -> Result<Arc<T>> {
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = c.iter().find(|(k, _)| *k == key) {
        return Ok(p.clone());
    }
    let p = Arc::new(build()?);
    c.push((key, p.clone()));
    Ok(p)
}

/// Threads per workgroup of the one-dimensional kernels: 256, or what the adapter allows.
/// Powers of two only: the kernels' tree reductions halve it.
pub(super) fn workgroup_size(l: &wgpu::Limits) -> u32 {
    let cap = l
        .max_compute_invocations_per_workgroup
        .min(l.max_compute_workgroup_size_x)
        .clamp(1, 256);
    1 << (31 - cap.leading_zeros())
}

/// The dot-product kernels' shared-dimension step: 16 where two 16-row slices fit in
/// workgroup memory (16.5 KB: 16 x 33 four-float pieces each, dots.wgsl), else 8.
pub(super) fn dots_step(l: &wgpu::Limits) -> u32 {
    if l.max_compute_workgroup_storage_size >= 2 * 16 * 33 * 16 {
        16
    } else {
        8
    }
}

/// Floats of sub-codebook the PQ kernel holds in workgroup memory (beside 256 norms).
pub(super) fn book_floats(l: &wgpu::Limits) -> usize {
    ((l.max_compute_workgroup_storage_size as usize / 4).saturating_sub(256 + 64))
        .min(256 * MAX_DSUB)
}

pub(super) fn fold(groups: usize) -> (u32, u32) {
    let g = groups.max(1);
    let x = g.min(MAX_GROUPS as usize);
    (x as u32, g.div_ceil(x) as u32)
}

/// Runs `f` inside validation and out-of-memory error scopes: what it got wrong becomes an
/// error instead of a panic or a later failure.
pub(super) fn scoped<T>(device: &wgpu::Device, f: impl FnOnce() -> T) -> Result<T> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let val = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let out = f();
    let v = pollster::block_on(val.pop());
    let o = pollster::block_on(oom.pop());
    if let Some(e) = o {
        return Err(Error::OutOfMemory(format!("WGPU: {e}")));
    }
    if let Some(e) = v {
        return Err(Error::Device(format!("WGPU: {e}")));
    }
    Ok(out)
}

/// Uploads larger than this go up in pieces of this size (`WgpuBackend::upload`).
pub(super) const STREAM_PIECE: usize = 16 << 20;

/// Bytes per task when the host fills staging memory: every thread takes part in a piece.
pub(super) const FILL_PIECE: usize = 1 << 20;

/// Uploads from this size on go through host-memory staging where the adapter has it.
pub(super) const HOST_STAGED: usize = 1 << 20;

/// Fills `mem` with the data's bytes, in 1 MB ranges on every thread, as `fill_mapped` does
/// a mapped buffer; whether they were clean.
pub(super) fn fill_host(
    mem: &mut [u8],
    fill: &(dyn Fn(wgpu::WriteOnly<'_, [u8]>, usize) -> bool + Sync),
) -> bool {
    use rayon::prelude::*;
    mem.par_chunks_mut(FILL_PIECE)
        .enumerate()
        .map(|(i, c)| fill(wgpu::WriteOnly::from_mut(c), i * FILL_PIECE))
        .reduce(|| true, |a, b| a & b)
}

/// Fills the start of the mapped buffer `b` with `len` bytes of data, in disjoint 1 MB ranges
/// on every thread: `fill(view, at)` writes the data's bytes from `at` on into the view and
/// says whether they were clean. Past the data the buffer keeps its zeros.
pub(super) fn fill_mapped(
    b: &Buf,
    len: usize,
    what: &str,
    fill: &(dyn Fn(wgpu::WriteOnly<'_, [u8]>, usize) -> bool + Sync),
) -> Result<bool> {
    use rayon::prelude::*;
    let size = b.size() as usize;
    let views = (0..size.div_ceil(FILL_PIECE))
        .map(|i| {
            let r = (i * FILL_PIECE) as u64..((i + 1) * FILL_PIECE).min(size) as u64;
            b.slice(r)
                .get_mapped_range_mut()
                .map_err(|e| Error::Device(format!("WGPU: mapping {what}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(views
        .into_par_iter()
        .enumerate()
        .map(|(i, mut v)| {
            let at = (i * FILL_PIECE).min(len);
            let (head, _) = v.slice(..).split_at(((i + 1) * FILL_PIECE).min(len) - at);
            fill(head, at)
        })
        .reduce(|| true, |a, b| a & b))
}

pub(super) fn pipeline(
    device: &wgpu::Device,
    module: &wgpu::ShaderModule,
    entry: &str,
) -> Result<wgpu::ComputePipeline> {
    scoped(device, || {
        device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        })
    })
}

/// Results on their way back from the device (`WgpuBackend::start_read`): the parts lie one
/// after another (offset, bytes) in one staging buffer.
pub(super) struct PendingRead {
    pub(super) stage: Buf,
    pub(super) parts: Vec<(usize, usize)>,
    pub(super) end: u64,
    pub(super) done: Arc<Mutex<Option<Result<()>>>>,
    pub(super) index: wgpu::SubmissionIndex,
}

impl PendingRead {
    /// Waits for the submission and returns the bytes of every part. The buffer is unmapped
    /// whenever its mapping came through, so that a kept one serves the next read even
    /// after an error.
    pub(super) fn finish(self, b: &WgpuBackend) -> Result<Vec<Vec<u8>>> {
        let waited = b
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(self.index),
                timeout: None,
            })
            .map_err(|e| Error::Device(format!("WGPU: {e}")));
        let mapped = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        let out = match mapped {
            Some(Ok(())) => {
                let view = self.stage.slice(..self.end).get_mapped_range();
                let out = view.map(|v| {
                    let parts = self.parts.iter();
                    parts
                        .map(|&(at, bytes)| v[at..at + bytes].to_vec())
                        .collect()
                });
                self.stage.unmap();
                out.map_err(|e| Error::Device(format!("WGPU: reading back: {e}")))
            }
            Some(Err(e)) => Err(e),
            None => Err(Error::Device("WGPU: a read-back was not mapped".into())),
        };
        // A loss comes first, from `check`, whatever the wait and the mapping said.
        b.check()?;
        waited?;
        let out = out?;
        let total: usize = self.parts.iter().map(|p| p.1).sum();
        b.d2h.fetch_add(total as u64, Ordering::Relaxed);
        Ok(out)
    }
}

/// A command encoder whose dispatches share one compute pass until a copy, a clear or the
/// end needs the encoder itself: closing a pass took the host longer than recording the
/// dispatch in it.
pub(crate) struct Rec {
    /// Declared first: dropped (so ended) before the encoder.
    pub(super) pass: Option<wgpu::ComputePass<'static>>,
    pub(super) enc: wgpu::CommandEncoder,
}

impl Rec {
    /// The open compute pass, begun if none is.
    pub(super) fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        self.pass.get_or_insert_with(|| {
            self.enc
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// The encoder, for a copy or a clear: ends the open pass first.
    pub(super) fn enc(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.enc
    }

    pub(super) fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        self.enc.finish()
    }
}

/// Bind groups a k-means session keeps: its iterations bind the same buffers with the same
/// parameters again and again, and making a bind group took more of the host's time than
/// recording its dispatch. Kept until the session drops them (the buffers with them).
#[derive(Default)]
pub(crate) struct Binds(RefCell<HashMap<BindKey, wgpu::BindGroup>>);

pub(super) type BindKey = (wgpu::ComputePipeline, [u32; 12], Vec<(u32, wgpu::Buffer)>);

impl Binds {
    /// Most groups kept: parameters that change every iteration (the trim) make new ones.
    pub(super) const MAX: usize = 256;

    pub(super) fn get(
        &self,
        pipe: &wgpu::ComputePipeline,
        params: &Params,
        bufs: &[(u32, &Buf)],
        make: impl FnOnce() -> wgpu::BindGroup,
    ) -> wgpu::BindGroup {
        let key = (
            pipe.clone(),
            params.0,
            bufs.iter().map(|&(i, b)| (i, b.raw.clone())).collect(),
        );
        let mut map = self.0.borrow_mut();
        if map.len() >= Self::MAX {
            map.clear();
        }
        map.entry(key).or_insert_with(make).clone()
    }

    /// Forgets every group (their buffers are about to be replaced).
    pub fn clear(&self) {
        self.0.borrow_mut().clear();
    }
}

/// Parameters of one dispatch: the kernels' `Params` structs, 12 words at most.
pub(crate) struct Params([u32; 12]);

impl Params {
    pub fn new(words: &[u32]) -> Params {
        let mut p = [0u32; 12];
        p[..words.len()].copy_from_slice(words);
        Params(p)
    }
}

pub(super) fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::InvalidArgument(format!("{what} {v} exceeds 2^32 - 1")))
}

impl WgpuBackend {
    /// The cooperative-matrix kernels, where they are used.
    pub(super) fn mma(&self) -> Option<&mma::Mma> {
        self.coop.as_ref().ok()
    }

    /// Whether the adapter is a software (CPU) driver: AUTO skips those.
    pub fn is_cpu_adapter(&self) -> bool {
        self.cpu_adapter
    }

    /// `e`, or where the device is lost and `e` is a device's failure, the loss: the root of
    /// whatever failed after it.
    pub(super) fn explain(&self, e: Error) -> Error {
        match (self.lost.get(), e) {
            (Some(why), Error::Device(_) | Error::OutOfMemory(_)) => Error::Device(why.clone()),
            (_, e) => e,
        }
    }

    /// The error the device reported since the last check (its loss first), if any.
    pub(super) fn check(&self) -> Result<()> {
        if let Some(why) = self.lost.get() {
            return Err(Error::Device(why.clone()));
        }
        match self.fault.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Largest buffer one storage binding may cover.
    pub(super) fn max_binding(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    pub(super) fn fits_binding(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes as u64 > self.max_binding() {
            return Err(Error::OutOfMemory(format!(
                "WGPU: {what} needs {bytes} bytes in one binding; the adapter allows {}",
                self.max_binding()
            )));
        }
        Ok(())
    }

    pub(super) const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
        .union(wgpu::BufferUsages::COPY_SRC)
        .union(wgpu::BufferUsages::COPY_DST);

    /// A new buffer; allocation failures come back as errors, not panics.
    pub(super) fn buffer(
        &self,
        what: &str,
        size: usize,
        usage: wgpu::BufferUsages,
        mapped: bool,
    ) -> Result<Buf> {
        self.room_for(size, what)?;
        let b = scoped(&self.device, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(what),
                size: size as u64,
                usage,
                mapped_at_creation: mapped,
            })
        })
        .map_err(|e| self.explain(e))?;
        let b = self.counted(b, size);
        // The allocator's report lists every allocation: read only where someone asked.
        if self.watch_memory.load(Ordering::Relaxed) {
            self.high_water
                .fetch_max(self.allocated(), Ordering::Relaxed);
        }
        Ok(b)
    }

    /// `raw` (of `size` bytes), counted in `count` until the device is done with it, as
    /// allocators place buffers: on 256-byte boundaries.
    pub(super) fn counted(&self, raw: wgpu::Buffer, size: usize) -> Buf {
        let bytes = size.next_multiple_of(256);
        self.count.held.fetch_add(bytes, Ordering::Relaxed);
        Buf {
            raw,
            _held: Arc::new(Held {
                bytes,
                count: self.count.clone(),
            }),
        }
    }

    /// Bytes of this backend's buffers the device may still hold: those dropped leave the
    /// count once the work submitted before them is done.
    fn counted_bytes(&self) -> usize {
        let dropped = self.count.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let count = self.count.clone();
            self.queue.on_submitted_work_done(move || {
                count.held.fetch_sub(dropped, Ordering::Relaxed);
            });
        }
        let _ = self.device.poll(wgpu::PollType::Poll);
        self.count.held.load(Ordering::Relaxed)
    }

    /// Device bytes the allocator holds for this device now, where it reports them (Vulkan
    /// does): buffers dropped since the last poll are freed first, so they do not count.
    /// Elsewhere, the bytes of this backend's buffers the device may still hold.
    pub(super) fn allocated(&self) -> usize {
        let _ = self.device.poll(wgpu::PollType::Poll);
        match self.device.generate_allocator_report() {
            Some(r) => r.total_allocated_bytes as usize,
            None => self.counted_bytes(),
        }
    }

    /// The test hook `no_allocator_report`: the cap reads the count of buffers while
    /// `memory_usage` still reads the allocator, so that tests measure what the count lets
    /// through.
    fn report_off(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        return self.opts.wgpu.no_allocator_report;
        #[cfg(not(feature = "test-hooks"))]
        false
    }

    /// The cap is checked against the count of this backend's own buffers: the adapter's
    /// allocator gives no report (or the test hook is set).
    pub(super) fn counts_own_buffers(&self) -> bool {
        self.report_off() || self.device.generate_allocator_report().is_none()
    }

    /// Device bytes in use as the cap sees them: `allocated`, or the count of buffers under
    /// the test hook.
    pub(super) fn in_use(&self) -> usize {
        match self.report_off() {
            true => self.counted_bytes(),
            false => self.allocated(),
        }
    }

    /// Rows of `row` bytes that take `1 / share` of the device memory the cap leaves (at
    /// least `least`); no bound without a cap.
    pub(super) fn rows_in_cap(&self, row: usize, share: usize, least: usize) -> usize {
        match crate::backend::Backend::memory_free(self) {
            Some(free) => (free / share / row.max(1)).max(least),
            None => usize::MAX,
        }
    }

    /// `OutOfMemory` where a buffer of `size` bytes would take the device memory in use
    /// (`in_use`) past the context's cap.
    fn room_for(&self, size: usize, what: &str) -> Result<()> {
        let cap = self.memory_cap.load(Ordering::Relaxed);
        if cap == 0 {
            return Ok(());
        }
        let now = self.in_use();
        if now.saturating_add(size) > cap {
            return Err(Error::OutOfMemory(format!(
                "WGPU: {what} needs {size} bytes of device memory with {now} of the \
                 {cap}-byte cap in use"
            )));
        }
        Ok(())
    }

    /// A zeroed storage buffer of `bytes` (at least 4).
    pub(super) fn zeros(&self, bytes: usize, what: &str) -> Result<Buf> {
        let size = bytes.max(4).next_multiple_of(4);
        self.fits_binding(size, what)?;
        self.buffer(what, size, Self::USAGE, false)
    }

    /// A storage buffer holding `data`, filled while mapped by all threads at once (one copy
    /// thread moves about 5 GB/s, the device takes several times that); above
    /// `STREAM_PIECE`, in pieces that go up while the next is filled.
    pub(super) fn upload<T: bytemuck::Pod>(&self, data: &[T], what: &str) -> Result<Buf> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let copy = |mut v: wgpu::WriteOnly<'_, [u8]>, at: usize| {
            v.copy_from_slice(&bytes[at..at + v.len()]);
            true
        };
        Ok(self.upload_with(bytes.len(), what, &copy)?.0)
    }

    /// As `upload`, checking every value on the way: `None` where one is not finite.
    pub(super) fn upload_finite(&self, data: &[f32], what: &str) -> Result<Option<Buf>> {
        let copy = |mut v: wgpu::WriteOnly<'_, [u8]>, at: usize| {
            // Pieces start at multiples of 1 MB: whole floats.
            let src = &data[at / 4..(at + v.len()) / 4];
            // SAFETY: the view is valid for writes of its whole length, src.len() floats.
            unsafe { crate::stage::stage_piece(v.as_raw_element_ptr().as_ptr().cast(), src) }
        };
        let (b, clean) = self.upload_with(std::mem::size_of_val(data), what, &copy)?;
        Ok(clean.then_some(b))
    }

    /// `upload_finite` of rows `row0..row0 + rows` of `x`: the caller's own where the view is
    /// plain, else read where they lie, each piece of the upload gathering its own stretch
    /// of the rows (a few MB on each thread at most).
    pub(super) fn upload_rows_finite(
        &self,
        x: RowsView,
        (row0, rows): (usize, usize),
        what: &str,
    ) -> Result<Option<Buf>> {
        if x.is_plain() {
            return self.upload_finite(&x.x[row0 * x.d..(row0 + rows) * x.d], what);
        }
        let copy = |mut v: wgpu::WriteOnly<'_, [u8]>, at: usize| {
            let src = x.values(row0, at / 4..(at + v.len()) / 4);
            // SAFETY: the view is valid for writes of its whole length, src.len() floats.
            unsafe { crate::stage::stage_piece(v.as_raw_element_ptr().as_ptr().cast(), &src) }
        };
        let (b, clean) = self.upload_with(rows * x.d * 4, what, &copy)?;
        Ok(clean.then_some(b))
    }

    /// Overwrites the start of `buf` with rows `row0..row0 + rows` of `x`, ordered before the
    /// next submission: where the view is not the caller's rows, gathered `FILL_PIECE` bytes
    /// at a time.
    pub(super) fn write_rows(&self, buf: &Buf, x: RowsView, (row0, rows): (usize, usize)) {
        let d = x.d;
        if x.is_plain() {
            return self.write(buf, &x.x[row0 * d..(row0 + rows) * d]);
        }
        let n = rows * d;
        for f in (0..n).step_by(FILL_PIECE / 4) {
            let v = x.values(row0, f..(f + FILL_PIECE / 4).min(n));
            let bytes: &[u8] = bytemuck::cast_slice(&v);
            self.queue.write_buffer(buf, (f * 4) as u64, bytes);
            self.h2d.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
    }

    /// `upload`'s body: `fill` moves the data's bytes from `at` on into a mapped view.
    pub(super) fn upload_with(
        &self,
        len: usize,
        what: &str,
        fill: &(dyn Fn(wgpu::WriteOnly<'_, [u8]>, usize) -> bool + Sync),
    ) -> Result<(Buf, bool)> {
        let size = len.max(4).next_multiple_of(4);
        self.fits_binding(size, what)?;
        let mut pool = self.host.lock().unwrap_or_else(|e| e.into_inner());
        let mut host = pool.as_mut().filter(|_| len >= HOST_STAGED);
        let mapped = host.is_none() && size <= STREAM_PIECE;
        let b = self.buffer(what, size, Self::USAGE, mapped)?;
        let mut clean = true;
        if mapped {
            clean = fill_mapped(&b, len, what, fill).map_err(|e| self.explain(e))?;
            b.unmap();
        } else {
            // In pieces, each copied up while the host fills the next: filling and the copy
            // take about as long, and in one piece they ran one after the other. The pieces
            // go through host memory where the adapter has it, else through mapped buffers.
            for at in (0..len).step_by(STREAM_PIECE) {
                let piece = STREAM_PIECE.min(len - at);
                let padded = piece.next_multiple_of(4);
                let shifted = |v: wgpu::WriteOnly<'_, [u8]>, o: usize| fill(v, at + o);
                // The source, and the pool's buffer behind it (back to the pool once sent),
                // or the staging buffer, held (and counted) until the copy is submitted.
                let mut staged = None;
                let (src, lent) = match host.as_deref_mut() {
                    Some(pool) => {
                        let mut hb = pool.take(&self.device).map_err(|e| self.explain(e))?;
                        let mem = &mut hb.bytes()[..padded];
                        mem[piece..].fill(0);
                        clean &= fill_host(&mut mem[..piece], &shifted);
                        (hb.buf.clone(), Some(hb))
                    }
                    None => {
                        let usage = wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC;
                        let stage = self.buffer("upload staging", padded, usage, true)?;
                        clean &= fill_mapped(&stage, piece, what, &shifted)
                            .map_err(|e| self.explain(e))?;
                        stage.unmap();
                        let raw = stage.raw.clone();
                        staged = Some(stage);
                        (raw, None)
                    }
                };
                let mut enc = self.encoder();
                enc.enc()
                    .copy_buffer_to_buffer(&src, 0, &b, at as u64, padded as u64);
                self.submit(enc);
                if let (Some(hb), Some(pool)) = (lent, host.as_deref_mut()) {
                    pool.give(&self.queue, hb);
                }
                drop(staged);
            }
        }
        self.h2d.fetch_add(len as u64, Ordering::Relaxed);
        Ok((b, clean))
    }

    /// Overwrites the start of `buf` with `data`, ordered before the next submission.
    pub(super) fn write<T: bytemuck::Pod>(&self, buf: &Buf, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.queue.write_buffer(buf, 0, bytes);
        self.h2d.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }

    pub(super) fn encoder(&self) -> Rec {
        Rec {
            pass: None,
            enc: self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None }),
        }
    }

    /// Records one dispatch of `pipe` with `params` at binding 0 and `bufs` at their bindings.
    pub(super) fn dispatch(
        &self,
        enc: &mut Rec,
        pipe: &wgpu::ComputePipeline,
        params: Params,
        bufs: &[(u32, &Buf)],
        groups: (u32, u32, u32),
    ) {
        self.dispatch_kept(enc, None, pipe, params, bufs, groups);
    }

    /// As `dispatch`, taking the bind group from `keep` (made there once) where given.
    pub(super) fn dispatch_kept(
        &self,
        enc: &mut Rec,
        keep: Option<&Binds>,
        pipe: &wgpu::ComputePipeline,
        params: Params,
        bufs: &[(u32, &Buf)],
        groups: (u32, u32, u32),
    ) {
        let bg = match keep {
            Some(k) => k.get(pipe, &params, bufs, || self.bind_group(pipe, &params, bufs)),
            None => self.bind_group(pipe, &params, bufs),
        };
        let pass = enc.pass();
        pass.set_pipeline(pipe);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
    }

    pub(super) fn bind_group(
        &self,
        pipe: &wgpu::ComputePipeline,
        params: &Params,
        bufs: &[(u32, &Buf)],
    ) -> wgpu::BindGroup {
        let ub = {
            let mut cache = self.uniforms.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= 4096 {
                cache.clear();
            }
            cache
                .entry(params.0)
                .or_insert_with(|| {
                    // Written, not mapped at creation: a lost device fails the write with an
                    // error where wgpu's mapped initialisation panics.
                    let size = std::mem::size_of_val(&params.0);
                    let ub = self.device.create_buffer(&wgpu::BufferDescriptor {
                        label: None,
                        size: size as u64,
                        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    });
                    self.queue
                        .write_buffer(&ub, 0, bytemuck::cast_slice(&params.0));
                    self.counted(ub, size)
                })
                .clone()
        };
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: ub.as_entire_binding(),
        }];
        entries.extend(bufs.iter().map(|(i, b)| wgpu::BindGroupEntry {
            binding: *i,
            resource: b.as_entire_binding(),
        }));
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// Submits what `enc` recorded.
    pub(super) fn submit(&self, enc: Rec) -> wgpu::SubmissionIndex {
        let index = self.queue.submit([enc.finish()]);
        #[cfg(feature = "test-hooks")]
        self.lose_if_due();
        index
    }

    /// The test hook `WgpuOptions::lose_after`.
    #[cfg(feature = "test-hooks")]
    fn lose_if_due(&self) {
        let left = self.lose_after.load(Ordering::Relaxed);
        if left > 0 && self.lose_after.fetch_sub(1, Ordering::Relaxed) == 1 {
            // A driver's loss is known at once (wgpu calls back from the failing call);
            // destroying reports only once the queue drains, so the hook records it here.
            self.device.destroy();
            let _ = self
                .lost
                .set("WGPU: the device was lost (WgpuOptions::lose_after)".into());
        }
    }

    /// Submits `enc` and waits for it.
    pub(super) fn finish(&self, enc: Rec) -> Result<()> {
        self.submit(enc);
        self.wait()
    }

    pub(super) fn wait(&self) -> Result<()> {
        let waited = self.device.poll(wgpu::PollType::wait_indefinitely());
        self.check()?;
        waited.map_err(|e| Error::Device(format!("WGPU: {e}")))?;
        Ok(())
    }

    /// Submits `enc` with copies of `parts` (buffer, bytes) appended, waits, and returns their
    /// bytes: one round trip for several small results.
    pub(super) fn read(&self, enc: Rec, parts: &[(&Buf, usize)]) -> Result<Vec<Vec<u8>>> {
        self.start_read(enc, parts, None)?.finish(self)
    }

    /// As `read`, without waiting: the device runs `enc` while the host goes on. The parts
    /// come back through `into` where it is large enough (a caller that reads every
    /// iteration keeps one), else through a new buffer.
    pub(super) fn start_read(
        &self,
        mut enc: Rec,
        parts: &[(&Buf, usize)],
        into: Option<&Buf>,
    ) -> Result<PendingRead> {
        // Copies move whole words, at least one.
        let padded = |bytes: usize| bytes.max(4).next_multiple_of(4);
        let mut at = Vec::with_capacity(parts.len());
        let mut end = 0;
        for &(_, bytes) in parts {
            at.push((end, bytes));
            end += padded(bytes);
        }
        let stage = match into {
            Some(s) if s.size() >= end as u64 => s.clone(),
            _ => self.buffer("readback", end, Self::READ_BACK, false)?,
        };
        for ((b, _), &(o, bytes)) in parts.iter().zip(&at) {
            enc.enc()
                .copy_buffer_to_buffer(b, 0, &stage, o as u64, padded(bytes) as u64);
        }
        let index = self.submit(enc);
        let done = Arc::new(Mutex::new(None));
        let d = done.clone();
        stage
            .slice(..end as u64)
            .map_async(wgpu::MapMode::Read, move |r| {
                let r = r.map_err(|e| Error::Device(format!("WGPU: reading back: {e}")));
                *d.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        Ok(PendingRead {
            stage,
            parts: at,
            end: end as u64,
            done,
            index,
        })
    }

    /// Usage of read-back buffers.
    pub(super) const READ_BACK: wgpu::BufferUsages =
        wgpu::BufferUsages::MAP_READ.union(wgpu::BufferUsages::COPY_DST);

    /// Workgroups (folded into two dimensions) for `items` threads of a 1-D kernel.
    pub(super) fn groups_for(&self, items: usize) -> (u32, u32, u32) {
        let (x, y) = fold(items.div_ceil(self.wg as usize));
        (x, y, 1)
    }
}
