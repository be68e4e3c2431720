//! Device memory: buffers counted against the backend's cap, uploads (staged, in pieces,
//! checked finite) and writes.

use super::*;

/// A device buffer, counted in its backend's bytes in use until the device is done with it:
/// what the device cap is checked against where the allocator gives no report (Metal).
#[derive(Clone, Debug)]
pub(crate) struct Buf {
    pub(super) raw: wgpu::Buffer,
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

impl WgpuBackend {
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
}
