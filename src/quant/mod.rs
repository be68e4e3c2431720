//! The Codebook: anchors, an optional rotation and the residual product quantizer.
//! Encoding: anchor = nearest anchor; residual r = x - anchor, zero-padded to M*dsub
//! (see `backend::layout`), rotated; then one sub-code per sub-space. Decoding inverts each step.

pub mod estimate;
pub mod pq;
mod residuals;
pub(crate) mod rotation;
mod training;

use pq::FitRun;
pub use pq::ProductQuantizer;

use crate::backend::host::sub_columns;
use crate::backend::layout::{self, source_column};
use crate::backend::{Backend, CodebookView, RowsView};
use crate::check::{check_finite, check_norms};
use crate::error::{Error, Result};
use crate::linalg::BLOCK;
use crate::params::{Metric, Rotation, TrainParams};
use crate::progress::{Phase, Progress, Watch};
use crate::rng::Rng;
use crate::train;
use rayon::prelude::*;
use residuals::Residuals;
use std::borrow::Cow;
use std::time::Instant;

/// Input vectors in either precision. f16 is widened block by block, never all at once.
#[derive(Clone, Copy, Debug)]
pub enum Vectors<'a> {
    F32(&'a [f32]),
    F16(&'a [half::f16]),
}

impl Vectors<'_> {
    /// Number of scalar values.
    pub fn len(&self) -> usize {
        match self {
            Vectors::F32(x) => x.len(),
            Vectors::F16(x) => x.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Rows `[start, start+rows)` of a d-column matrix, as f32.
    pub(crate) fn rows_f32(&self, start: usize, rows: usize, d: usize) -> Cow<'_, [f32]> {
        match self {
            Vectors::F32(x) => Cow::Borrowed(&x[start * d..(start + rows) * d]),
            Vectors::F16(x) => Cow::Owned(
                x[start * d..(start + rows) * d]
                    .iter()
                    .map(|v| v.to_f32())
                    .collect(),
            ),
        }
    }
}

impl<'a> From<&'a [f32]> for Vectors<'a> {
    fn from(x: &'a [f32]) -> Self {
        Vectors::F32(x)
    }
}

impl<'a> From<&'a [half::f16]> for Vectors<'a> {
    fn from(x: &'a [half::f16]) -> Self {
        Vectors::F16(x)
    }
}

/// Rows encoded per block: bounds the scratch memory of encoding to a few MB.
pub(crate) const ENCODE_BLOCK: usize = 65_536;

/// Values per encoded block when someone listens to progress: a report (and a chance to
/// cancel) about every 30-70 ms of encoding on two cores.
const WATCHED_BLOCK_VALUES: usize = 1 << 20;

/// Rows of `d` values in a block of about `WATCHED_BLOCK_VALUES`.
pub(crate) fn small_block_rows(d: usize) -> usize {
    (WATCHED_BLOCK_VALUES / d.max(1)).clamp(256, ENCODE_BLOCK)
}

/// Whether training `p` alternates the learned rotation with quantizer fits (after its
/// eigenvalue start): those alternations hold the codebooks' rows, never rebuilt.
pub(crate) fn alternates(p: &TrainParams) -> bool {
    p.rotation == Rotation::Learned && p.opq_iters > 0
}

/// Rows per block of the codebooks' sample (`d` values a row) given their nearest anchors:
/// whole blocks of `BLOCK` rows, the same whether the sample is held or read in place.
pub(crate) fn assign_block_rows(d: usize) -> usize {
    small_block_rows(d).next_multiple_of(BLOCK)
}

/// Rows per block of `d` values for work reported to `watch`: `unwatched` when nobody listens.
/// Watched blocks hold whole `BLOCK`s for each thread: 2,730 rows of 384 values (10.7 row
/// blocks) left one of two threads idle for the last 8% of each.
fn block_rows(d: usize, watch: &Watch, unwatched: usize) -> usize {
    if watch.listening() {
        small_block_rows(d)
            .next_multiple_of(BLOCK * rayon::current_num_threads())
            .min(ENCODE_BLOCK)
    } else {
        unwatched
    }
}

/// Runs `f` on the rows (of `width` values) of `x` block by block, polling `watch` before
/// each block; in one piece when nobody listens.
fn polled_blocks(
    x: &[f32],
    width: usize,
    watch: &Watch,
    mut f: impl FnMut(&[f32]) -> Result<()>,
) -> Result<()> {
    let rows = block_rows(width, watch, usize::MAX);
    for part in x.chunks(rows.saturating_mul(width)) {
        watch.poll()?;
        f(part)?;
    }
    Ok(())
}

/// `layout::rotate` block by block, polling `watch` between blocks.
fn rotate_polled(r: &[f32], x: &[f32], dp: usize, watch: &Watch) -> Result<Vec<f32>> {
    // One output, filled block by block: no block is rotated into a copy first.
    let mut out = vec![0f32; x.len()];
    let mut at = 0;
    polled_blocks(x, dp, watch, |part| {
        layout::rotate_into(r, part, dp, &mut out[at..at + part.len()]);
        at += part.len();
        Ok(())
    })?;
    Ok(out)
}

/// What training measured.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct TrainReport {
    /// Final anchor energy (mean squared distance to the nearest anchor, training points).
    pub energy: f64,
    /// Largest anchor load over the mean load (training points).
    pub max_list_over_mean: f64,
    pub iterations: usize,
    pub anchor_seconds: f64,
    pub pq_seconds: f64,
    /// Mean squared reconstruction error of the PQ training sample.
    pub pq_mse: f64,
}

/// A trained codebook: the portable artifact that encodes, decodes and anchors an index.
#[derive(Clone, Debug, PartialEq)]
pub struct Codebook {
    pub(crate) d: usize,
    pub(crate) metric: Metric,
    /// m x d.
    pub(crate) anchors: Vec<f32>,
    pub(crate) rotation: Rotation,
    /// dp x dp (`y = R r`), empty when there is no rotation.
    pub(crate) rot: Vec<f32>,
    pub(crate) rot_t: Vec<f32>,
    pub(crate) pq: ProductQuantizer,
    pub(crate) fingerprint: u64,
}

impl Codebook {
    /// Assembles a codebook from its parts, checking every size (used by the file reader).
    pub(crate) fn from_parts(
        d: usize,
        metric: Metric,
        anchors: Vec<f32>,
        rotation: Rotation,
        rot: Vec<f32>,
        pq: ProductQuantizer,
    ) -> Result<Codebook> {
        let dp = pq.dim();
        let bad = |m: String| Err(Error::Corrupt(m));
        if d == 0 || anchors.is_empty() || !anchors.len().is_multiple_of(d) {
            return bad(format!(
                "anchors ({} values) do not fit d = {d}",
                anchors.len()
            ));
        }
        let levelled = !pq.levels.is_empty();
        if let Err(m) = check_shape(d, anchors.len() / d, pq.nsub, pq.bits, pq.dsub, levelled) {
            return bad(m);
        }
        if pq.centroids.len() != pq.nsub * pq.ksub() * pq.dsub {
            return bad("quantizer centroid count".into());
        }
        if (rotation == Rotation::None) != rot.is_empty()
            || (!rot.is_empty() && rot.len() != dp * dp)
        {
            return bad("rotation size".into());
        }
        check_finite(&anchors, "anchors")?;
        check_finite(&rot, "rotation")?;
        check_finite(&pq.centroids, "quantizer centroids")?;
        check_norms(&anchors, d, "anchors")?;
        check_norms(&pq.centroids, pq.dsub, "quantizer centroids")?;
        if !pq.levels.is_empty() {
            let ok = pq.levels.len() == pq.ksub()
                && metric == Metric::L2
                && pq.levels[0] >= 0.0
                && pq.levels.windows(2).all(|w| w[0] <= w[1])
                && pq
                    .levels
                    .iter()
                    .all(|v| v.is_finite() && *v <= f32::MAX / 8.0);
            if !ok {
                return bad(format!(
                    "{} error levels (codes under L2 keep 2^bits = {}, ascending, finite, >= 0)",
                    pq.levels.len(),
                    pq.ksub()
                ));
            }
        }
        // An orthogonal matrix has no entry above 1 in magnitude.
        if let Some(v) = rot.iter().find(|v| v.abs() > 1.0 + 1e-3) {
            return bad(format!("rotation holds {v:e}, not an orthogonal matrix"));
        }
        let rot_t = if rot.is_empty() {
            Vec::new()
        } else {
            rotation::transpose(&rot, dp)
        };
        let mut cb = Codebook {
            d,
            metric,
            anchors,
            rotation,
            rot,
            rot_t,
            pq,
            fingerprint: 0,
        };
        cb.fingerprint = cb.compute_fingerprint();
        Ok(cb)
    }

    fn compute_fingerprint(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for v in [
            self.d as u64,
            self.metric.code() as u64,
            self.rotation.code() as u64,
            self.pq.nsub as u64,
            self.pq.bits as u64,
            self.pq.dsub as u64,
        ] {
            h.update(&v.to_le_bytes());
        }
        h.update(bytemuck::cast_slice(&self.anchors));
        h.update(bytemuck::cast_slice(&self.rot));
        h.update(bytemuck::cast_slice(&self.pq.centroids));
        // Only codebooks with levels hash them: the others keep their fingerprints.
        h.update(bytemuck::cast_slice(&self.pq.levels));
        h.digest()
    }

    pub fn dim(&self) -> usize {
        self.d
    }
    pub fn metric(&self) -> Metric {
        self.metric
    }
    pub fn anchors(&self) -> usize {
        self.anchors.len() / self.d
    }
    pub fn anchor_vectors(&self) -> &[f32] {
        &self.anchors
    }
    pub fn quantizer(&self) -> &ProductQuantizer {
        &self.pq
    }
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }
    /// Hash of the codebook's contents: indexes with the same fingerprint can be merged.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
    /// Bytes of a residual code (what an index stores per vector).
    pub fn residual_code_size(&self) -> usize {
        self.pq.code_size()
    }
    /// The shape memory estimates and devices size their buffers from.
    pub fn shape(&self) -> estimate::Shape {
        estimate::Shape {
            anchors: self.anchors(),
            d: self.dim(),
            dp: self.pq.dim(),
            nsub: self.pq.nsub,
            fields: self.pq.code_fields(),
            ksub: self.pq.ksub(),
            code: self.residual_code_size(),
            metric: self.metric(),
            rotated: !self.rot.is_empty(),
        }
    }
    /// This codebook as devices read it.
    pub fn view(&self) -> CodebookView<'_> {
        CodebookView {
            key: self.fingerprint,
            d: self.d,
            metric: self.metric,
            anchors: &self.anchors,
            rotation: &self.rot,
            nsub: self.pq.nsub,
            dsub: self.pq.dsub,
            bits: self.pq.bits,
            books: &self.pq.centroids,
            levels: &self.pq.levels,
        }
    }
    /// Bytes of the anchor id in codec mode: 1, 2 or 4.
    pub fn anchor_id_size(&self) -> usize {
        match self.anchors() {
            0..=256 => 1,
            257..=65_536 => 2,
            _ => 4,
        }
    }
    /// Bytes per vector in codec mode: anchor id, then the residual code.
    pub fn codec_size(&self) -> usize {
        self.anchor_id_size() + self.residual_code_size()
    }

    /// Nearest anchor and residual code of each row of `x` (n x d).
    pub fn encode_parts(
        &self,
        backend: &dyn Backend,
        x: Vectors<'_>,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        self.encode_parts_watched(backend, x, &Watch::none())
    }

    /// `encode_parts`, reporting rows done to `watch` (phase `Encode`) block by block.
    pub(crate) fn encode_parts_watched(
        &self,
        backend: &dyn Backend,
        x: Vectors<'_>,
        watch: &Watch,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        let d = self.d;
        let n = crate::check::whole_rows(x.len(), d, "values")?;
        if let (true, Vectors::F32(xs), false, false) = (
            backend.checks_input(),
            x,
            self.metric == Metric::Cosine,
            watch.listening(),
        ) {
            // Nothing to convert or normalize: the backend checks while it uploads.
            let (ids, idx) = backend.encode_residuals(&self.view(), xs)?;
            return Ok((ids, self.pq.pack_owned(idx)));
        }
        let mut ids = Vec::with_capacity(n);
        let mut codes = Vec::with_capacity(n * self.residual_code_size());
        let rows = block_rows(d, watch, ENCODE_BLOCK);
        // Block `start`, checked and prepared for the metric.
        let block_at = |start: usize| -> Result<Cow<'_, [f32]>> {
            let block = x.rows_f32(start, rows.min(n - start), d);
            crate::check::check_finite_from(&block, "vectors", start * d)?;
            crate::check::check_norms_from(&block, d, "vectors", start)?;
            Ok(prepare(block, d, self.metric))
        };
        let mut start = 0;
        let mut block = (n > 0).then(|| block_at(0)).transpose()?;
        while let Some(cur) = block {
            watch.report(Phase::Encode, start, n)?;
            // The host checks the next block while the backend encodes this one (a device
            // backend mostly waits on the device meanwhile).
            let next = start + rows;
            let (done, ahead) = rayon::join(
                || backend.encode_residuals(&self.view(), &cur),
                || (next < n).then(|| block_at(next)).transpose(),
            );
            let (a, idx) = done?;
            codes.extend(self.pq.pack_owned(idx));
            ids.extend(a);
            block = ahead?;
            start = next;
        }
        watch.report(Phase::Encode, n, n)?;
        Ok((ids, codes))
    }

    /// Approximate vectors (n x d) from anchor ids and residual codes.
    pub fn decode_parts(&self, anchor_ids: &[u32], codes: &[u8]) -> Result<Vec<f32>> {
        let (d, dp, cs, dsub) = (
            self.d,
            self.pq.dim(),
            self.residual_code_size(),
            self.pq.dsub,
        );
        let n = anchor_ids.len();
        if codes.len() != n * cs {
            return Err(Error::InvalidArgument(format!(
                "{} code bytes for {n} vectors of {cs} bytes",
                codes.len()
            )));
        }
        let m = self.anchors() as u32;
        if let Some(bad) = anchor_ids.iter().find(|&&a| a >= m) {
            return Err(Error::InvalidArgument(format!(
                "anchor id {bad} out of range (codebook has {m})"
            )));
        }
        let mut y = vec![0f32; n * dp];
        self.pq.decode(codes, &mut y);
        let r = if self.rot.is_empty() {
            y
        } else {
            layout::rotate(&self.rot_t, &y, dp)
        };
        let mut out = vec![0f32; n * d];
        out.par_chunks_mut(d)
            .zip(r.par_chunks(dp))
            .zip(anchor_ids.par_iter())
            .for_each(|((o, rr), &a)| {
                let anc = &self.anchors[a as usize * d..(a as usize + 1) * d];
                for (p, &v) in rr.iter().enumerate() {
                    if let Some(t) = source_column(p, d, dsub, dp) {
                        o[t] = anc[t] + v;
                    }
                }
            });
        Ok(out)
    }

    /// As `encode_parts`, for `n` vectors in device memory at address `at` (as CUDA
    /// addresses it; CUDA backends only).
    ///
    /// # Safety
    /// Nothing writes the `n` vectors at `at` while the call runs.
    pub unsafe fn encode_parts_device(
        &self,
        backend: &dyn Backend,
        at: u64,
        n: usize,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        // SAFETY: as the caller vouches.
        unsafe { self.encode_parts_device_watched(backend, at, n, &Watch::none()) }
    }

    /// `encode_parts_device`, reporting to `watch`: one device call per block of rows when
    /// someone listens, so that a cancel waits for one block at most.
    ///
    /// # Safety
    /// Nothing writes the `n` vectors at `at` while the call runs.
    pub(crate) unsafe fn encode_parts_device_watched(
        &self,
        backend: &dyn Backend,
        at: u64,
        n: usize,
        watch: &Watch,
    ) -> Result<(Vec<u32>, Vec<u8>)> {
        let rows = block_rows(self.d, watch, n.max(1));
        let mut ids = Vec::with_capacity(n);
        let mut codes = Vec::with_capacity(n * self.residual_code_size());
        // One device call per block; at least one, so that an empty input still reaches the
        // backend's checks.
        let mut start = 0;
        loop {
            watch.report(Phase::Encode, start, n)?;
            let len = rows.min(n - start);
            let offset = (start * self.d * std::mem::size_of::<f32>()) as u64;
            // SAFETY: as the caller vouches; rows start..start+len of the n at `at`.
            let (a, idx) = unsafe { backend.encode_device(&self.view(), at + offset, len)? };
            ids.extend(a);
            codes.extend(self.pq.pack_owned(idx));
            start += len;
            if start >= n {
                break;
            }
        }
        watch.report(Phase::Encode, n, n)?;
        Ok((ids, codes))
    }

    /// Codec mode: `codec_size()` bytes per vector (little-endian anchor id, then the code).
    pub fn encode(&self, backend: &dyn Backend, x: Vectors<'_>) -> Result<Vec<u8>> {
        self.encode_watched(backend, x, &Watch::none())
    }

    pub(crate) fn encode_watched(
        &self,
        backend: &dyn Backend,
        x: Vectors<'_>,
        watch: &Watch,
    ) -> Result<Vec<u8>> {
        let (ids, codes) = self.encode_parts_watched(backend, x, watch)?;
        Ok(self.records(&ids, &codes))
    }

    /// As `encode`, for `n` vectors in device memory at address `at` (`encode_parts_device`).
    ///
    /// # Safety
    /// Nothing writes the `n` vectors at `at` while the call runs.
    pub unsafe fn encode_device(
        &self,
        backend: &dyn Backend,
        at: u64,
        n: usize,
    ) -> Result<Vec<u8>> {
        // SAFETY: as the caller vouches.
        unsafe { self.encode_device_watched(backend, at, n, &Watch::none()) }
    }

    /// # Safety
    /// Nothing writes the `n` vectors at `at` while the call runs.
    pub(crate) unsafe fn encode_device_watched(
        &self,
        backend: &dyn Backend,
        at: u64,
        n: usize,
        watch: &Watch,
    ) -> Result<Vec<u8>> {
        // SAFETY: as the caller vouches.
        let (ids, codes) = unsafe { self.encode_parts_device_watched(backend, at, n, watch)? };
        Ok(self.records(&ids, &codes))
    }

    /// Codec records: each anchor id (little-endian, `anchor_id_size()` bytes), then its code.
    pub(crate) fn records(&self, ids: &[u32], codes: &[u8]) -> Vec<u8> {
        let (ab, cs) = (self.anchor_id_size(), self.residual_code_size());
        let mut out = vec![0u8; ids.len() * (ab + cs)];
        out.par_chunks_mut(ab + cs)
            .zip(ids.par_iter())
            .zip(codes.par_chunks(cs.max(1)))
            .for_each(|((rec, a), code)| {
                rec[..ab].copy_from_slice(&a.to_le_bytes()[..ab]);
                rec[ab..].copy_from_slice(code);
            });
        out
    }

    /// Codec mode: approximate vectors from `encode`'s bytes.
    pub fn decode(&self, bytes: &[u8]) -> Result<Vec<f32>> {
        let (ab, cs) = (self.anchor_id_size(), self.residual_code_size());
        if !bytes.len().is_multiple_of(ab + cs) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes are not a whole number of {}-byte codes",
                bytes.len(),
                ab + cs
            )));
        }
        let n = bytes.len() / (ab + cs);
        let mut ids = Vec::with_capacity(n);
        let mut codes = Vec::with_capacity(n * cs);
        for rec in bytes.chunks_exact(ab + cs) {
            let mut b = [0u8; 4];
            b[..ab].copy_from_slice(&rec[..ab]);
            ids.push(u32::from_le_bytes(b));
            codes.extend_from_slice(&rec[ab..]);
        }
        self.decode_parts(&ids, &codes)
    }
}

/// The shapes training can produce: d >= 1, 1..=2^32-1 anchors, 8-bit codes with 1..=4096
/// sub-quantizers or 4-bit codes with an even 2..=8192 (`bytes_per_vector` in 1..=4096), the
/// error level taking one of them where `levelled`, and dsub = ceil(d / M). Anything else is
/// refused before a table is sized from it.
pub(crate) fn check_shape(
    d: usize,
    anchors: usize,
    nsub: usize,
    bits: u32,
    dsub: usize,
    levelled: bool,
) -> std::result::Result<(), String> {
    let max_nsub = crate::params::MAX_BYTES_PER_VECTOR * 8 / bits.max(1) as usize;
    let fields = nsub + usize::from(levelled);
    if d == 0 || d > u32::MAX as usize {
        Err(format!("dimension d = {d} is not in 1..={}", u32::MAX))
    } else if anchors == 0 || anchors > u32::MAX as usize {
        Err(format!("{anchors} anchors is not in 1..={}", u32::MAX))
    } else if bits != 8 && bits != 4 {
        Err(format!("bits = {bits}, expected 8 or 4"))
    } else if nsub == 0 || fields > max_nsub || !(fields * bits as usize).is_multiple_of(8) {
        Err(format!(
            "M = {nsub} sub-quantizers of {bits} bits{} is not a whole number of bytes in 1..={}",
            if levelled { " and an error level" } else { "" },
            crate::params::MAX_BYTES_PER_VECTOR
        ))
    } else if dsub != d.div_ceil(nsub) {
        Err(format!(
            "sub-space width {dsub} is not ceil(d / M) = {} for d = {d}, M = {nsub}",
            d.div_ceil(nsub)
        ))
    } else {
        Ok(())
    }
}

/// Cosine works on unit vectors: normalise (zero vectors stay zero), in place when `x` is
/// already owned. Other metrics pass through.
pub(crate) fn prepare<'a>(
    x: impl Into<Cow<'a, [f32]>>,
    d: usize,
    metric: Metric,
) -> Cow<'a, [f32]> {
    if metric == Metric::Cosine {
        layout::unit_rows(x, d)
    } else {
        x.into()
    }
}
