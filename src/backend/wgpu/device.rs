//! Device plumbing: shader modules and pipelines, buffers and uploads, submissions and
//! read-backs, bind groups and parameter blocks.

use super::*;

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
