//! Training a codebook: anchors by annealed k-means, then the rotation and the product
//! quantizer on the residuals, and the error levels where the code carries one.

use super::*;

impl Codebook {
    /// Trains anchors, then the residual quantizer, on `x` (n x d), reporting to `progress`.
    pub fn train(
        backend: &dyn Backend,
        x: &[f32],
        d: usize,
        p: &TrainParams,
        progress: &dyn Progress,
    ) -> Result<(Codebook, TrainReport)> {
        Codebook::train_watched(backend, x, d, p, &Watch::new(progress), usize::MAX, true)
    }

    /// `train` reporting to `watch`, with at most `at_once` sub-quantizers training at a
    /// time, and the codebooks' residuals `held` as one copy or rebuilt where read
    /// (`estimate::training_fit`): the codebook is the same either way.
    pub(crate) fn train_watched(
        backend: &dyn Backend,
        x: &[f32],
        d: usize,
        p: &TrainParams,
        watch: &Watch,
        at_once: usize,
        held: bool,
    ) -> Result<(Codebook, TrainReport)> {
        p.validate()?;
        crate::check::whole_rows(x.len(), d, "values")?;
        if x.is_empty() {
            return Err(Error::NotEnoughData(
                "0 training vectors: training needs at least 1".into(),
            ));
        }
        check_finite(x, "training vectors")?;
        check_norms(x, d, "training vectors")?;
        // Rows are prepared for the metric where a step takes them (cosine: made unit length),
        // so that steps that train on samples need no prepared copy of the whole input.
        let n = x.len() / d;
        let t0 = Instant::now();
        let anchors =
            train::anneal::train_anchors_watched(backend, x, d, &p.anchor, p.metric, watch)?;
        let anchor_seconds = t0.elapsed().as_secs_f64();

        let t1 = Instant::now();
        let nsub = p.subquantizers(d);
        let dsub = d.div_ceil(nsub);
        let dp = nsub * dsub;
        let rng = Rng::new(p.anchor.seed ^ 0x9a);
        let idx = (p.pq_train_points > 0 && n > p.pq_train_points)
            .then(|| rng.fork(1).sample_indices(n, p.pq_train_points));
        let view = RowsView {
            x,
            d,
            pick: idx.as_deref(),
            unit: p.metric == Metric::Cosine,
        };
        // Every sub-quantizer fit, the rotation's alternations' and the final one's.
        let passes = match p.rotation {
            Rotation::Learned => p.opq_iters + 1,
            _ => 1,
        };
        watch.report(Phase::Codebooks, 0, passes * nsub)?;
        // The sample is one prepared copy where its residuals are held (they are written
        // over it), else read where it lies. Its nearest anchors go in blocks of rows,
        // polled between: the same blocks either way, so the same anchors.
        let hold = held || alternates(p);
        let sample = hold.then(|| view.whole());
        let (ns, rows) = (view.len(), assign_block_rows(d));
        let mut assign = Vec::with_capacity(ns);
        let mut buf = Vec::new();
        for start in (0..ns).step_by(rows) {
            watch.poll()?;
            let len = rows.min(ns - start);
            let part = match &sample {
                Some(s) => &s[start * d..(start + len) * d],
                None => view.block(start, len, &mut buf),
            };
            assign.extend(backend.nearest(part, d, &anchors.centroids)?.0);
        }
        drop(buf);
        let resid = Residuals::new(view, sample, &anchors.centroids, assign, dsub, dp);
        let nr = resid.rows();
        let poll = || watch.poll();
        let seed = p.anchor.seed ^ 0x70;
        let rot = match p.rotation {
            Rotation::None => Vec::new(),
            Rotation::Random => rotation::random_orthogonal(dp, seed),
            Rotation::Learned => {
                // OPQ: start from the eigenvalue allocation (balanced variance per sub-space),
                // then alternate a few Lloyd steps of a warm-started quantizer with the
                // orthogonal Procrustes fit of the rotation to its reconstructions.
                // The rotation is fitted on a sample; the final quantizer uses every point.
                let fit_rows = match p.opq_train_points {
                    0 => nr,
                    t => nr.min(t),
                };
                let mut cross = rotation::Cross::new(dp);
                for start in (0..fit_rows).step_by(rotation::CROSS_CHUNK) {
                    poll()?;
                    let c = resid.block(start, rotation::CROSS_CHUNK.min(fit_rows - start));
                    cross.add(&c, &c);
                }
                let mut r = rotation::eigen_allocation_of(cross, nsub);
                // Alternations always hold their rows (`hold` below).
                if let (1.., Some(held)) = (p.opq_iters, resid.held()) {
                    let fit = &held[..fit_rows * dp];
                    let mut pq: Option<ProductQuantizer> = None;
                    for pass in 0..p.opq_iters {
                        // The rotated rows, then their reconstructions written over them.
                        let mut y = rotate_polled(&r, fit, dp, watch)?;
                        let (q, _) = ProductQuantizer::train(
                            backend,
                            fit_rows,
                            &|j| sub_columns(&y, dp, j * dsub, dsub),
                            dp,
                            nsub,
                            p.bits,
                            4,
                            seed,
                            pq.as_ref(),
                            watch,
                            FitRun {
                                pass,
                                passes,
                                at_once,
                            },
                        )?;
                        let codes = q.encode(backend, &y)?;
                        q.decode(&codes, &mut y);
                        r = rotation::procrustes(fit, &y, dp, &poll)?;
                        pq = Some(q);
                    }
                }
                r
            }
        };
        let last = FitRun {
            pass: passes - 1,
            passes,
            at_once,
        };
        let (pq, err) = ProductQuantizer::train(
            backend,
            nr,
            &|j| resid.columns(&rot, j),
            dp,
            nsub,
            p.bits,
            p.pq_iters,
            seed,
            None,
            watch,
            last,
        )?;
        let mut pq = pq;
        if p.error_code_for(d) {
            pq.levels = sample_levels(backend, &pq, nr, &|j| resid.columns(&rot, j), watch)?;
        }
        let pq_mse = err / nr.max(1) as f64;
        // The last report may still cancel: nothing has been handed out yet.
        watch.report(Phase::Codebooks, passes * nsub, passes * nsub)?;

        let report = TrainReport {
            energy: anchors.energy,
            max_list_over_mean: anchors.max_over_mean(),
            iterations: anchors.iterations,
            anchor_seconds,
            pq_seconds: t1.elapsed().as_secs_f64(),
            pq_mse,
        };
        Ok((
            Codebook::from_parts(d, p.metric, anchors.centroids, p.rotation, rot, pq)?,
            report,
        ))
    }
}

/// Error levels fitted to the squared errors of `n` training rows under `pq` (sub-space j's
/// columns given by `columns(j)`), summed over the sub-spaces in order.
fn sample_levels(
    backend: &dyn Backend,
    pq: &ProductQuantizer,
    n: usize,
    columns: &dyn Fn(usize) -> Vec<f32>,
    watch: &Watch,
) -> Result<Vec<f32>> {
    let mut errs = vec![0f32; n];
    for j in 0..pq.nsub {
        watch.poll()?;
        let (_, dist) = backend.nearest(&columns(j), pq.dsub, pq.sub(j))?;
        for (e, v) in errs.iter_mut().zip(dist) {
            *e += v.max(0.0);
        }
    }
    Ok(pq::fit_levels(&mut errs, pq.ksub()))
}
