//! The annealed robust k-means loop (docs/training.md, "The loop"):
//!
//! init (k-means++) -> repeat { assign (GEMM + argmin, with a load-balancing bias) ->
//! reduce (trimmed mean) -> update } with maintenance (merge close anchors, split overloaded
//! ones) every few iterations, until the energy stops moving or the iteration cap.
//!
//! The temperature T = T0 * cooling^t controls two things, both fading to plain Lloyd as T
//! cools: the trimmed fraction (robustness against outliers early on, the exact mean at the end)
//! and the balancing bias (crowded anchors cost more to join, so lists even out before the
//! positions settle). `docs/training.md` has the measurements that justify both.

use crate::backend::{Backend, Poll, RowsView};
use crate::error::{Error, Result};
use crate::linalg;
use crate::params::{AnchorParams, Init};
use crate::progress::{Phase, Progress, Watch};
use crate::rng::Rng;
use rayon::prelude::*;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Trained anchors and how training went.
#[derive(Clone, Debug)]
pub struct AnchorResult {
    /// k x d, row-major.
    pub centroids: Vec<f32>,
    /// Mean squared distance of the training points to their nearest anchor, at the end.
    pub energy: f64,
    /// Points per anchor at the end (training points).
    pub counts: Vec<u32>,
    /// Iterations run.
    pub iterations: usize,
    /// Energy after each assignment.
    pub history: Vec<f64>,
    /// Anchors left with no points by each assignment (same steps as `history`). Outside
    /// the maintenance interval, only those of assignments followed by no balancing bias are
    /// re-seeded at once.
    pub empty_anchors: Vec<usize>,
    /// Training points used (after sampling).
    pub points: usize,
}

impl AnchorResult {
    /// Largest list over mean list size: 1.0 is perfectly balanced.
    pub fn max_over_mean(&self) -> f64 {
        let max = self.counts.iter().copied().max().unwrap_or(0) as f64;
        let mean = self.points as f64 / self.counts.len().max(1) as f64;
        if mean > 0.0 {
            max / mean
        } else {
            0.0
        }
    }
}

/// Trains `p.anchors` anchors on `x` (n x d) with the annealed robust loop.
pub fn train_anchors(
    backend: &dyn Backend,
    x: &[f32],
    d: usize,
    p: &AnchorParams,
    progress: &dyn Progress,
) -> Result<AnchorResult> {
    train_anchors_watched(
        backend,
        x,
        d,
        p,
        crate::params::Metric::L2,
        &Watch::new(progress),
    )
}

/// [`train_anchors`] on `x` prepared for `metric` (rows made unit length for cosine: only the
/// rows sampled, where it samples), reporting to `watch`: each iteration's steps, polls
/// within them, and the end, which may still cancel.
pub(crate) fn train_anchors_watched(
    backend: &dyn Backend,
    x: &[f32],
    d: usize,
    p: &AnchorParams,
    metric: crate::params::Metric,
    watch: &Watch,
) -> Result<AnchorResult> {
    let tick = |it| watch.report(Phase::Anchors, it, p.max_iters);
    let poll = || watch.poll();
    let r = train_anchors_prepared(backend, x, d, p, None, &tick, &poll, metric)?;
    watch.report(Phase::Anchors, p.max_iters, p.max_iters)?;
    Ok(r)
}

/// Like [`train_anchors`], starting from `init` (k x d) instead of k-means++ when given:
/// warm starts, as the learned rotation uses between its alternations. `tick(it)` runs
/// before each long step of iteration `it`, `poll` within them; an error from either stops
/// the training.
pub fn train_anchors_from(
    backend: &dyn Backend,
    x: &[f32],
    d: usize,
    p: &AnchorParams,
    init: Option<&[f32]>,
    tick: &(dyn Fn(usize) -> Result<()> + Sync),
    poll: Poll,
) -> Result<AnchorResult> {
    train_anchors_prepared(
        backend,
        x,
        d,
        p,
        init,
        tick,
        poll,
        crate::params::Metric::L2,
    )
}

/// `train_anchors_from` on `x` prepared for `metric`: the rows it trains on (a sample, or
/// all) are prepared once taken, so that a sample of a cosine input costs no normalised copy
/// of the whole input. Rows are prepared one by one, so the result is the same.
#[allow(clippy::too_many_arguments)]
fn train_anchors_prepared(
    backend: &dyn Backend,
    x: &[f32],
    d: usize,
    p: &AnchorParams,
    init: Option<&[f32]>,
    tick: &(dyn Fn(usize) -> Result<()> + Sync),
    poll: Poll,
    metric: crate::params::Metric,
) -> Result<AnchorResult> {
    p.validate()?;
    let n = crate::check::whole_rows(x.len(), d, "values")?;
    let k = p.anchors;
    if n < k {
        return Err(Error::NotEnoughData(format!(
            "{n} training points for {k} anchors (need n >= anchors)"
        )));
    }
    // `BackendOptions::trace_host`: the host's time in each step and kind of session call,
    // device waits included.
    let mut trace = crate::trace::Trace::new("train", backend.options().trace_host.as_ref());
    let rng = Rng::new(p.seed);

    // Sample the training set: beyond a few hundred points per anchor, more data costs time
    // and changes little.
    let idx = (p.max_points_per_anchor > 0 && n > k * p.max_points_per_anchor)
        .then(|| rng.fork(1).sample_indices(n, k * p.max_points_per_anchor));
    let xs = RowsView {
        x,
        d,
        pick: idx.as_deref(),
        unit: metric == crate::params::Metric::Cosine,
    };
    let ns = xs.len();
    // A session that trains on every point checks them on their way to the device; a sample
    // does not cover every point, so the host checks the whole input first.
    let session_checks = backend.checks_input() && xs.is_plain();
    if !session_checks {
        crate::check::check_finite(x, "training vectors")?;
    }
    trace.mark("check+sample", || ());

    if init.is_some_and(|c| c.len() != k * d) {
        return Err(Error::InvalidArgument(format!(
            "initial anchors must be {k} x {d}"
        )));
    }
    let mut c = match (init, p.init) {
        (Some(c), _) => c.to_vec(),
        (None, Init::KMeansPlusPlus) => kmeans_pp(xs, k, &mut rng.fork(2)),
        (None, Init::Sample) => xs.gather(&rng.fork(2).sample_indices(ns, k)),
    };
    trace.mark("init", || ());
    // Where the session checks, it names the value as the host's check would: `xs` is `x`.
    let mut sess = backend.kmeans_session_in_place(xs, p.precision)?;
    sess.set_centroids(&c)?;
    trace.mark("session", || ());

    let mut history = Vec::with_capacity(p.max_iters + 1);
    let mut empty_anchors = Vec::with_capacity(p.max_iters + 1);
    let empty = |counts: &[u32]| counts.iter().filter(|&&v| v == 0).count();
    let mut split_rng = rng.fork(3);
    let mut bias: Option<Vec<f32>> = None;
    // Each anchor's load over the mean, less one, smoothed over iterations.
    let mut load = vec![0f32; k];
    let mean = ns as f32 / k as f32;
    let mut iterations = 0;
    // The last fifth of the iterations is a quench at T = 0: whatever the schedule, the
    // anchors returned are the plain means of their points.
    let quench = p.max_iters - (p.max_iters / 5).max(1);
    let heat_at = |it: usize| {
        if p.initial_temp > 0.0 && it < quench {
            p.cooling_rate.powi(it as i32)
        } else {
            0.0
        }
    };
    for it in 0..p.max_iters {
        // `tick` may cancel: before each of the iteration's two long steps.
        tick(it)?;
        sess.allow_rough(bias.is_some());
        let stats = sess.assign_polled(bias.as_deref(), poll)?;
        trace.mark("assign", || ());
        let energy = stats.energy / ns as f64;
        history.push(energy);
        empty_anchors.push(empty(&stats.counts));
        iterations = it + 1;
        // Energy-based stop, once cold: while annealing, the energy may pause before moving on.
        if it > 0 && p.tol > 0.0 && heat_at(it - 1) == 0.0 {
            let prev = history[it - 1];
            if prev > 0.0 && ((prev - energy) / prev).abs() < p.tol {
                break;
            }
        }
        let heat = heat_at(it);
        tick(it)?;
        sess.update_polled(p.trim * heat, poll)?;
        trace.mark("update", || ());

        // The next assignment's bias, from the smoothed loads (see `LOAD_SMOOTHING`).
        for (l, &v) in load.iter_mut().zip(&stats.counts) {
            let r = v as f32 / mean - 1.0;
            *l = if it == 0 {
                r
            } else {
                LOAD_SMOOTHING * r + (1.0 - LOAD_SMOOTHING) * *l
            };
        }
        bias = (p.balance > 0.0 && heat > 0.0).then(|| {
            let scale = p.balance * heat * energy as f32;
            load.iter()
                .map(|&l| scale * l.clamp(-1.0, LOAD_CAP))
                .collect()
        });

        // An empty anchor under a bias costs the least to join, so the next assignment fills
        // it again: re-seeding waits for the interval, and each iteration keeps one round trip.
        let empties = empty_anchors[it] > 0 && bias.is_none();
        // Also at the first cold iteration: its counts are the first without the balancing
        // bias, so the splits it makes answer the real overloads before the quench settles.
        let maintain = p.maintenance_interval > 0
            && ((it + 1) % p.maintenance_interval == 0 || it == quench)
            && it + 1 < p.max_iters;
        if empties || maintain {
            let spread;
            (c, spread) = sess.centroids_and_spread()?;
            maintenance(
                &mut c,
                d,
                &stats.counts,
                &spread,
                p,
                maintain,
                &mut split_rng,
            );
            sess.set_centroids(&c)?;
        }
        trace.mark("bias+maintenance", || ());
    }
    // A last plain assignment: the energy and counts of the anchors we return.
    tick(iterations)?;
    sess.allow_rough(false);
    let stats = sess.assign_polled(None, poll)?;
    let energy = stats.energy / ns as f64;
    history.push(energy);
    empty_anchors.push(empty(&stats.counts));
    let centroids = sess.centroids()?;
    trace.mark("last assign", || ());
    Ok(AnchorResult {
        centroids,
        energy,
        counts: stats.counts,
        iterations,
        history,
        empty_anchors,
        points: ns,
    })
}

/// k-means++ seeding on at most 8k points of `x` (D^2 sampling). Enough to place anchors well;
/// the full set refines them.
fn kmeans_pp(x: RowsView, k: usize, rng: &mut Rng) -> Vec<f32> {
    let (n, d) = (x.len(), x.d);
    let s = n.min(8 * k.max(32));
    let pts = if s < n {
        Cow::Owned(x.gather(&rng.sample_indices(n, s)))
    } else {
        x.whole()
    };
    let row = |i: usize| &pts[i * d..(i + 1) * d];
    let mut c = Vec::with_capacity(k * d);
    let first = rng.below(s);
    c.extend_from_slice(row(first));
    let mut best: Vec<f32> = (0..s)
        .into_par_iter()
        .map(|i| linalg::l2_sq(row(i), row(first)))
        .collect();
    for _ in 1..k {
        let total: f64 = best.iter().map(|&v| v as f64).sum();
        let pick = if total > 0.0 {
            let mut r = rng.next_f64() * total;
            let mut pick = s - 1;
            for (i, &v) in best.iter().enumerate() {
                r -= v as f64;
                if r < 0.0 {
                    pick = i;
                    break;
                }
            }
            pick
        } else {
            rng.below(s) // fewer distinct points than anchors
        };
        let new = row(pick).to_vec();
        best.par_iter_mut().enumerate().for_each(|(i, b)| {
            let v = linalg::l2_sq(row(i), &new);
            if v < *b {
                *b = v;
            }
        });
        c.extend_from_slice(&new);
    }
    c
}

/// Weight of the latest counts in the smoothed load behind the balancing bias. A bias from
/// the latest counts alone overshoots: the anchors of one tight cluster sit almost equally far
/// from its points, so the least-loaded one takes most of them and is crowded the next
/// iteration, leaving a quarter of the anchors empty in every warm iteration
/// (docs/training.md).
const LOAD_SMOOTHING: f32 = 0.3;

/// The smoothed load's penalty stops growing at this many times the mean above it: a hub
/// twice the mean already sheds its edge points, and a larger push empties it at once.
const LOAD_CAP: f32 = 1.0;

/// Maintenance re-seats at most one anchor in this many per round.
const RESEAT_EVERY: usize = 32;

/// Merge anchors that sit on top of each other, re-seed empty ones, and split overloaded ones
/// into the freed slots, so that the anchor count stays fixed and lists stay balanced.
fn maintenance(
    c: &mut [f32],
    d: usize,
    counts: &[u32],
    spread: &[f32],
    p: &AnchorParams,
    full: bool,
    rng: &mut Rng,
) {
    let k = counts.len();
    let n: u64 = counts.iter().map(|&v| v as u64).sum();
    let mean = n as f64 / k as f64;
    let mut load: Vec<f64> = counts.iter().map(|&v| v as f64).collect();
    let mut free: Vec<usize> = (0..k).filter(|&j| counts[j] == 0).collect();

    if full && p.merge_threshold > 0.0 && k > 1 {
        // Nearest other anchor of each anchor, through one GEMM.
        let cn = linalg::row_norms(c, d);
        let mut nn = vec![0u32; k];
        let mut nd = vec![0f32; k];
        nearest_other(c, &cn, d, &mut nn, &mut nd);
        for j in 0..k {
            let o = nn[j] as usize;
            if load[j] == 0.0 || load[o] == 0.0 || free.contains(&o) || free.contains(&j) {
                continue;
            }
            let radius = spread[j].max(spread[o]).max(0.0);
            if nd[j] < p.merge_threshold * p.merge_threshold * radius {
                let (big, small) = if load[j] >= load[o] { (j, o) } else { (o, j) };
                let (wb, ws) = (load[big], load[small]);
                for t in 0..d {
                    c[big * d + t] = ((c[big * d + t] as f64 * wb + c[small * d + t] as f64 * ws)
                        / (wb + ws)) as f32;
                }
                load[big] += ws;
                load[small] = 0.0;
                free.push(small);
            }
        }
    }
    // A cluster's cost: its points times their mean squared distance (its share of the energy).
    let mut cost: Vec<f64> = (0..k)
        .map(|j| load[j] * spread[j].max(0.0) as f64)
        .collect();
    if full {
        // Free more slots from near-empty anchors while some anchor is overloaded.
        let over = (0..k)
            .filter(|&j| load[j] > p.split_factor as f64 * mean)
            .count();
        if over > free.len() {
            let mut small: Vec<usize> = (0..k)
                .filter(|&j| load[j] > 0.0 && load[j] < 0.25 * mean)
                .collect();
            small.sort_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)));
            for j in small.into_iter().take(over - free.len()) {
                load[j] = 0.0;
                free.push(j);
            }
        }
        // Re-seat a few of the cheapest anchors onto the costliest clusters: their points move
        // to neighbours at little cost, while a split removes a large share of a big cost.
        let mut cheap: Vec<usize> = (0..k).filter(|&j| load[j] > 0.0).collect();
        cheap.sort_by(|&a, &b| cost[a].total_cmp(&cost[b]).then(a.cmp(&b)));
        let median = cheap.get(cheap.len() / 2).map_or(0.0, |&j| cost[j]);
        for j in cheap.into_iter().take((k / RESEAT_EVERY).max(1)) {
            if cost[j] < 0.25 * median {
                load[j] = 0.0;
                cost[j] = 0.0;
                free.push(j);
            }
        }
    }
    free.sort_unstable();
    free.dedup();
    // Overloaded clusters split first, largest first: the cost order alone can pass over a
    // dense hub whose points sit close together.
    let mut free = free.into_iter();
    if full {
        let mut over: Vec<usize> = (0..k)
            .filter(|&j| load[j] > p.split_factor as f64 * mean)
            .collect();
        over.sort_by(|&a, &b| load[b].total_cmp(&load[a]).then(a.cmp(&b)));
        for big in over {
            let Some(slot) = free.next() else { break };
            split(c, d, big, slot, spread[big], rng);
            load[big] /= 2.0;
            load[slot] = load[big];
            cost[big] /= 2.0;
            cost[slot] = cost[big];
        }
    }
    // Costliest first (smaller index on ties); entries whose cost has changed since they were
    // pushed are stale and skipped, so each split costs O(log k), not O(k).
    let mut heap: BinaryHeap<Costly> = (0..k).map(|j| Costly(cost[j], j)).collect();
    for slot in free {
        // The costliest cluster gives up half its points: two copies pushed apart along a
        // random direction by half its radius; the next assignment separates them.
        let big = loop {
            match heap.peek() {
                Some(&Costly(v, j)) if v.to_bits() != cost[j].to_bits() => drop(heap.pop()),
                top => break top.map(|t| t.1),
            }
        };
        let Some(big) = big else {
            break;
        };
        if load[big] < 2.0 {
            break;
        }
        if !full && load[big] <= mean && counts[slot] != 0 {
            continue;
        }
        split(c, d, big, slot, spread[big], rng);
        load[big] /= 2.0;
        load[slot] = load[big];
        cost[big] /= 2.0;
        cost[slot] = cost[big];
        heap.push(Costly(cost[big], big));
        heap.push(Costly(cost[slot], slot));
    }
}

/// A cluster's cost and index, ordered by cost, then by smaller index.
struct Costly(f64, usize);

impl PartialEq for Costly {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Costly {}
impl PartialOrd for Costly {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Costly {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(o.1.cmp(&self.1))
    }
}

/// Moves anchor `slot` next to `big`: two copies pushed apart along a random direction by half
/// the cluster's radius; the next assignment divides the points between them.
fn split(c: &mut [f32], d: usize, big: usize, slot: usize, spread: f32, rng: &mut Rng) {
    let r = (spread.max(1e-12) as f64).sqrt() * 0.5;
    // Coordinates uniform in [-1, 1): any direction that is not special will do, and it costs
    // no transcendental calls per coordinate (splits can run for hundreds of slots per round).
    let dir: Vec<f64> = (0..d).map(|_| 2.0 * rng.next_f64() - 1.0).collect();
    let norm = dir.iter().map(|v| v * v).sum::<f64>().sqrt().max(1e-12);
    for t in 0..d {
        let off = (dir[t] / norm * r) as f32;
        let base = c[big * d + t];
        c[slot * d + t] = base + off;
        c[big * d + t] = base - off;
    }
}

/// For each anchor, its nearest other anchor and the squared distance.
fn nearest_other(c: &[f32], cn: &[f32], d: usize, nn: &mut [u32], nd: &mut [f32]) {
    // Blocks of 32 rows, not linalg::BLOCK: with a few hundred anchors one 256-row block ran
    // on one core, and this product is most of a maintenance round's host time.
    const ROWS: usize = 32;
    let k = cn.len();
    c.par_chunks(ROWS * d)
        .zip(nn.par_chunks_mut(ROWS))
        .zip(nd.par_chunks_mut(ROWS))
        .enumerate()
        .for_each(|(b, ((cb, nb), db))| {
            let r = cb.len() / d;
            let mut buf = vec![0f32; r * k];
            linalg::dot_block(cb, c, d, &mut buf);
            for i in 0..r {
                let gi = b * ROWS + i;
                let (mut best, mut bj) = (f32::INFINITY, 0);
                for j in 0..k {
                    if j == gi {
                        continue;
                    }
                    let v = cn[gi] + cn[j] - 2.0 * buf[i * k + j];
                    if v < best {
                        best = v;
                        bj = j;
                    }
                }
                nb[i] = bj as u32;
                db[i] = best.max(0.0);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maintenance_splits_an_overloaded_cluster_before_a_costlier_one() {
        // Anchor 0 holds 200 of 220 points, tightly (cost 200 x 0.2 = 40); anchors 1-4 hold 5
        // points each, loosely (cost 50 each); anchor 5 is empty, so one split is to be made.
        let mut c = vec![
            0.0, 0.0, 100.0, 0.0, 0.0, 100.0, 100.0, 100.0, 200.0, 0.0, 500.0, 500.0,
        ];
        let counts = [200, 5, 5, 5, 5, 0];
        let spread = [0.2, 10.0, 10.0, 10.0, 10.0, 0.0];
        let p = AnchorParams::default();
        maintenance(&mut c, 2, &counts, &spread, &p, true, &mut Rng::new(1));
        let gap = |a: usize, b: usize| {
            ((c[2 * a] - c[2 * b]).powi(2) + (c[2 * a + 1] - c[2 * b + 1]).powi(2)).sqrt()
        };
        assert!(gap(5, 0) < 1.0, "the empty anchor went to {:?}", &c[10..]);
        for j in 1..5 {
            assert!(gap(5, j) > 50.0);
        }
    }
}
