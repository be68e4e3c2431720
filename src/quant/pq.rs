//! Product quantization of (rotated, padded) residuals: M sub-spaces of `dsub` dimensions, each
//! with 2^bits centroids trained by the same k-means engine as the anchors.

pub(crate) use crate::backend::layout::get_code;
use crate::backend::Backend;
use crate::error::Result;
use crate::params::AnchorParams;
use crate::progress::{Phase, Watch};
use crate::train::anneal;
use rayon::prelude::*;

/// M sub-codebooks of `ksub` centroids each.
#[derive(Clone, Debug, PartialEq)]
pub struct ProductQuantizer {
    /// Number of sub-quantizers M.
    pub nsub: usize,
    /// Bits per sub-code: 8 or 4.
    pub bits: u32,
    /// Dimensions per sub-space.
    pub dsub: usize,
    /// M x ksub x dsub, row-major.
    pub centroids: Vec<f32>,
    /// Empty, or the 2^bits squared errors (ascending) that a code's last sub-code (its
    /// last byte, or nibble at 4 bits) picks from: the error of the M sub-codes before it
    /// (`error_code`).
    pub levels: Vec<f32>,
}

/// How one quantizer fit runs within a training: fit `pass` of `passes` (for reports), with
/// at most `at_once` sub-spaces training at a time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FitRun {
    pub pass: usize,
    pub passes: usize,
    pub at_once: usize,
}

impl ProductQuantizer {
    pub fn ksub(&self) -> usize {
        1 << self.bits
    }
    /// Padded dimension M * dsub.
    pub fn dim(&self) -> usize {
        self.nsub * self.dsub
    }
    /// Sub-codes a code holds: M, and the error level's where there are levels.
    pub fn code_fields(&self) -> usize {
        self.nsub + usize::from(!self.levels.is_empty())
    }
    /// Bytes of one code: its sub-codes', the error level's included.
    pub fn code_size(&self) -> usize {
        (self.code_fields() * self.bits as usize).div_ceil(8)
    }
    /// Centroids of sub-space `j` (ksub x dsub).
    pub fn sub(&self, j: usize) -> &[f32] {
        let s = self.ksub() * self.dsub;
        &self.centroids[j * s..(j + 1) * s]
    }

    /// With `warm`, each sub-space starts from that quantizer's centroids instead of k-means++.
    /// Reports go to `watch` (phase `Codebooks`), which may cancel.
    /// Trains on `n` rows of `dpad` = M * dsub columns, sub-space j's columns (n x dsub)
    /// given by `columns(j)`. Sub-spaces train in parallel, at most `run.at_once` at a time,
    /// each with its own seed, so the result does not depend on scheduling. Returns the
    /// quantizer with its squared error summed over the rows (each sub-space's, in order).
    pub(crate) fn train(
        backend: &dyn Backend,
        n: usize,
        columns: &(dyn Fn(usize) -> Vec<f32> + Sync),
        dpad: usize,
        nsub: usize,
        bits: u32,
        iters: usize,
        seed: u64,
        warm: Option<&ProductQuantizer>,
        watch: &Watch,
        run: FitRun,
    ) -> Result<(Self, f64)> {
        debug_assert!(dpad.is_multiple_of(nsub));
        let dsub = dpad / nsub;
        let k = 1usize << bits;
        // Reports count sub-spaces over all the fits.
        let finished = std::sync::atomic::AtomicUsize::new(0);
        let report = || {
            let done = run.pass * nsub + finished.load(std::sync::atomic::Ordering::Relaxed);
            watch.report(Phase::Codebooks, done, run.passes * nsub)
        };
        let one = |j: usize| -> Result<(Vec<f32>, f64)> {
            let sub = columns(j);
            let p = AnchorParams::lloyd(k.min(n), iters, seed.wrapping_add(j as u64 * 7919));
            let init = warm
                .filter(|w| w.dsub == dsub && w.bits == bits && k <= n)
                .map(|w| w.sub(j));
            let poll = || watch.poll();
            let r =
                anneal::train_anchors_from(backend, &sub, dsub, &p, init, &|_| report(), &poll)?;
            finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut c = r.centroids;
            // Fewer points than centroids: repeat the last ones (never chosen twice).
            c.resize(k * dsub, 0.0);
            for i in r.counts.len()..k {
                let src = (i % r.counts.len().max(1)) * dsub;
                for t in 0..dsub {
                    c[i * dsub + t] = c[src + t];
                }
            }
            // The sub-space's error, from its own columns while they are at hand.
            let (_, dist) = backend.nearest(&sub, dsub, &c)?;
            let err = dist.iter().map(|&v| v.max(0.0) as f64).sum::<f64>();
            Ok((c, err))
        };
        // A device backend holds its device through a call and stages data on this thread
        // pool meanwhile: a call made from a pool task could wait there on another call
        // that needs the device. Device backends run one call at a time anyway, so their
        // sub-spaces go one after another.
        // Each sub-space in training holds a copy of its columns: under a memory cap, fewer
        // train at once, in waves.
        let subs: Vec<Result<(Vec<f32>, f64)>> = if backend.caps().concurrent_calls {
            let wave = run.at_once.clamp(1, nsub.max(1));
            (0..nsub)
                .step_by(wave)
                .flat_map(|s| {
                    (s..(s + wave).min(nsub))
                        .into_par_iter()
                        .map(one)
                        .collect::<Vec<_>>()
                })
                .collect()
        } else {
            (0..nsub).map(one).collect()
        };
        let mut centroids = Vec::with_capacity(nsub * k * dsub);
        let mut err = 0f64;
        for s in subs {
            let (c, e) = s?;
            centroids.extend(c);
            err += e;
        }
        let pq = ProductQuantizer {
            nsub,
            bits,
            dsub,
            centroids,
            levels: Vec::new(),
        };
        Ok((pq, err))
    }

    /// Codes of `y` (n x M*dsub), `code_size` bytes each.
    pub fn encode(&self, backend: &dyn Backend, y: &[f32]) -> Result<Vec<u8>> {
        let dp = self.dim();
        let n = y.len() / dp;
        debug_assert_eq!(y.len(), n * dp);
        let idx = backend.pq_assign(y, self.nsub, self.dsub, &self.centroids)?;
        Ok(self.pack_owned(idx))
    }

    /// As [`pack`](Self::pack), taking the indices: 8-bit codes are the indices themselves,
    /// returned without a copy.
    pub(crate) fn pack_owned(&self, idx: Vec<u8>) -> Vec<u8> {
        if self.bits == 8 {
            idx
        } else {
            self.pack(&idx)
        }
    }

    /// Codes from per-subspace indices (n x nsub, as `Backend::pq_assign` returns them).
    pub fn pack(&self, idx: &[u8]) -> Vec<u8> {
        if self.bits == 8 {
            // One byte per index: the indices are the codes.
            return idx.to_vec();
        }
        let (cs, fields) = (self.code_size(), self.code_fields());
        let mut codes = vec![0u8; idx.len() / fields.max(1) * cs];
        codes
            .par_chunks_mut(cs)
            .zip(idx.par_chunks(fields))
            .for_each(|(code, row)| {
                for (j, &c) in row.iter().enumerate() {
                    set_code(code, j, self.bits, c);
                }
            });
        codes
    }

    /// Reconstructions (n x M*dsub) of `codes`.
    pub fn decode(&self, codes: &[u8], out: &mut [f32]) {
        let cs = self.code_size();
        let dp = self.dim();
        out.par_chunks_mut(dp)
            .zip(codes.par_chunks(cs))
            .for_each(|(o, code)| {
                for j in 0..self.nsub {
                    let c = get_code(code, j, self.bits) as usize;
                    let src = &self.sub(j)[c * self.dsub..(c + 1) * self.dsub];
                    o[j * self.dsub..(j + 1) * self.dsub].copy_from_slice(src);
                }
            });
    }
}

/// `count` error levels for the squared errors `errs` (sorted here): the means of equal
/// shares of them in order, so that each level names as many training rows. Fewer rows than
/// levels repeat the last.
pub(crate) fn fit_levels(errs: &mut [f32], count: usize) -> Vec<f32> {
    errs.sort_unstable_by(f32::total_cmp);
    let n = errs.len();
    let mut levels = Vec::with_capacity(count);
    for i in 0..count {
        let (a, b) = (i * n / count, (i + 1) * n / count);
        let share = &errs[a..b];
        levels.push(if share.is_empty() {
            levels.last().copied().unwrap_or(0.0)
        } else {
            (share.iter().map(|&v| v as f64).sum::<f64>() / share.len() as f64) as f32
        });
    }
    // Means of ordered shares ascend; rounding may tie, never reverse.
    for i in 1..count {
        levels[i] = levels[i].max(levels[i - 1]);
    }
    levels
}

#[inline]
fn set_code(code: &mut [u8], j: usize, bits: u32, v: u8) {
    if bits == 8 {
        code[j] = v;
    } else {
        let sh = (j & 1) * 4;
        code[j / 2] = (code[j / 2] & !(0xf << sh)) | (v << sh);
    }
}
