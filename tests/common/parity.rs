//! The parity tests every device backend passes against the CPU reference, written once:
//! `parity_tests!(gpu, plan)` in a backend's test file makes one `#[test]` of each for it,
//! where `gpu()` opens the device (or skips) and `plan()` gives the data and the slack its
//! arithmetic needs (a GPU takes the whole demo set; a software adapter a slice of it).

use super::*;
use vlc_compress::backend::KmeansSession;
use vlc_compress::{AnchorParams, ErrorCode, Fallbacks, Init, Metric, Precision, Rotation};

/// A training's codebook shape for `code_agreement`: bytes, bits, rotation, error level.
pub type CodeCase = (usize, u32, Rotation, ErrorCode);
/// A search's index for `search_parity`: metric, rotation, re-rank depth, error level.
pub type SearchCase = (Metric, Rotation, usize, ErrorCode);

/// What one backend's parity tests run on, and what they allow it.
pub struct Plan {
    pub name: &'static str,
    pub base: vecio::Matrix<f32>,
    pub query: Vec<f32>,
    /// The queries' exact top-`gt_cols` in `base`.
    pub gt: Vec<i32>,
    pub gt_cols: usize,
    /// Anchors and lists probed of the indexes searched.
    pub anchors: usize,
    pub nprobe: usize,
    /// Anchor trainings compared: anchors, trim, init; at most `anchor_iters` iterations
    /// where set.
    pub anchor_cases: Vec<(usize, f32, Init)>,
    pub anchor_iters: Option<usize>,
    pub code_cases: Vec<CodeCase>,
    /// How far the mean recall over three trainings on the device may fall below the CPU's.
    pub recall_slack: f64,
    pub search_cases: Vec<SearchCase>,
    /// How far recall@10 of one index searched on the device may move from the host's.
    pub search_slack: f64,
    /// The k-means sessions compared: points, dimension, centroids, clusters, seed.
    pub session: (usize, usize, usize, usize, u64),
    /// Trimmed steps the streamed and in-place sessions take before they are compared
    /// (device-order sums drift apart a little more with each).
    pub session_steps: (usize, usize),
    /// Precisions the streamed sessions are compared at.
    pub precisions: Vec<Precision>,
    /// Whether sessions give the same bits streamed or in place (else centroids agree to
    /// 1e-5, the device's sums running in an atomic scatter's order).
    pub bit_exact: bool,
    /// The device cap that streams a session's points: from the bytes held now and its shape.
    pub stream_cap: fn(usize, usize, usize) -> usize,
    /// Whether the cap bounds what the device holds in all (else what the session adds).
    pub cap_counts_held: bool,
    /// What the run report names for a range search on this backend.
    pub range_reason: Fallbacks,
}

pub fn anchors(g: &Arc<Context>, plan: &Plan) {
    eprintln!("{}", g.backend().describe());
    let (x, d) = (&plan.base.data, plan.base.cols);
    for &(anchors, trim, init) in &plan.anchor_cases {
        let mut p = AnchorParams {
            anchors,
            trim,
            init,
            ..AnchorParams::default()
        };
        if let Some(iters) = plan.anchor_iters {
            p.max_iters = iters;
        }
        anchor_parity(g, x, d, &p, &format!("k={anchors} trim={trim} {init:?}"));
    }
    let t = g.backend().transfers();
    assert!(t.h2d_bytes > 0 && t.d2h_bytes > 0);
}

pub fn codes_and_recall(g: &Arc<Context>, plan: &Plan) {
    let cpu = ctx(0);
    // One codebook, two backends: the codes must agree for nearly every vector.
    for &case in &plan.code_cases {
        let frac = code_agreement(&cpu, g, &plan.base, plan.anchors, case);
        assert!(frac >= 0.99, "{case:?}: only {frac} of codes are identical");
    }
    // Trained on each backend, searched the same way. The two part ways at the first
    // near-tie the device rounds differently, so one seed compares two training draws: a
    // worse index is the failure, a luckier draw is not, so the bound is one-sided.
    let recall = |c: &Arc<Context>| {
        let (anchors, nprobe) = (plan.anchors, plan.nprobe);
        mean_recall(
            c,
            &plan.base,
            &plan.query,
            &plan.gt,
            plan.gt_cols,
            anchors,
            nprobe,
        )
    };
    let (rc, rg) = (recall(&cpu), recall(g));
    eprintln!(
        "mean recall@10 over 3 seeds: cpu {rc:.4} {} {rg:.4}",
        plan.name
    );
    assert!(
        rg >= rc - plan.recall_slack,
        "recall cpu {rc} vs {} {rg}",
        plan.name
    );
}

pub fn device_search(g: &Arc<Context>, plan: &Plan) {
    let (gt, cols) = (&plan.gt, plan.gt_cols);
    let check = |host: &vlc_compress::SearchResults,
                 dev: &vlc_compress::SearchResults,
                 d2h: u64,
                 what: &str| {
        // The results came from the device, not from the host fallback.
        assert!(d2h > 0, "{what}: searched on the host");
        let (rh, rd) = (
            recall(&host.ids, 10, gt, cols, 10),
            recall(&dev.ids, 10, gt, cols, 10),
        );
        eprintln!("{what}: recall host {rh:.4} device {rd:.4}");
        assert!(
            (rh - rd).abs() <= plan.search_slack,
            "{what}: recall {rh} vs {rd}"
        );
    };
    let (anchors, nprobe) = (plan.anchors, plan.nprobe);
    search_parity(
        g,
        &plan.base,
        &plan.query,
        anchors,
        nprobe,
        &plan.search_cases,
        check,
    );
}

/// A session's first assignment with its distances, then its centroids and spreads.
type SessionRun = ((Vec<u32>, Vec<f32>), Vec<f32>, Vec<f32>);

/// The first assignment of a session from `init` and what `steps` trimmed steps from it
/// give, every other one after the first biased by `bias` where it is not empty.
fn session_run(
    s: vlc_compress::Result<Box<dyn KmeansSession + '_>>,
    init: &[f32],
    bias: &[f32],
    steps: usize,
) -> SessionRun {
    let mut s = s.unwrap();
    s.set_centroids(init).unwrap();
    s.assign(None).unwrap();
    let first = s.assignment_with_distances().unwrap();
    for step in 0..steps {
        // The first step updates from the first assignment; later ones assign again, every
        // other one biased.
        if step > 0 {
            s.assign((!bias.is_empty() && step % 2 == 1).then_some(bias))
                .unwrap();
        }
        s.update(0.1).unwrap();
    }
    s.assign(None).unwrap();
    let (c, spread) = s.centroids_and_spread().unwrap();
    (first, c, spread)
}

/// Two runs of `session_run` agree: bit for bit, or the same first assignment and
/// centroids and spreads within 1e-5.
fn same_sessions(plan: &Plan, a: &SessionRun, b: &SessionRun, what: &str) {
    if plan.bit_exact {
        assert!(a == b, "{what}: the sessions differ");
        return;
    }
    assert!(a.0 .0 == b.0 .0, "{what}: the first assignment differs");
    let worst = worst_relative(&a.1, &b.1);
    assert!(worst < 1e-5, "{what}: centroids differ by {worst}");
}

/// A k-means session whose points do not fit under the device cap streams them a block at
/// a time: what a resident session gives from the same centroids, within the cap.
pub fn streamed_sessions(g: &Arc<Context>, plan: &Plan) {
    let b = g.backend();
    if b.memory_usage(true).is_none() {
        eprintln!("skipped: this adapter's allocator does not report its memory");
        return;
    }
    let (n, d, k, clusters, seed) = plan.session;
    let x = clustered(n, d, clusters, seed);
    let init = x[..k * d].to_vec();
    let bias: Vec<f32> = (0..k).map(|j| (j % 5) as f32 * 0.01).collect();
    for &precision in &plan.precisions {
        let run = || {
            session_run(
                b.kmeans_session(&x, d, precision),
                &init,
                &bias,
                plan.session_steps.0,
            )
        };
        g.set_device_memory_cap(0);
        let whole = run();
        let (before, _) = b.memory_usage(true).unwrap();
        let cap = (plan.stream_cap)(before, n, d);
        g.set_device_memory_cap(cap);
        b.memory_usage(true);
        let streamed = run();
        let (_, high) = b.memory_usage(false).unwrap();
        g.set_device_memory_cap(0);
        let used = if plan.cap_counts_held {
            high
        } else {
            high - before
        };
        assert!(used <= cap, "{precision:?}: peak {used} over the cap {cap}");
        same_sessions(plan, &whole, &streamed, &format!("{precision:?} streamed"));
    }
}

/// A session on rows read where they lie (a sample, made unit length, as training's) gives
/// what one on a prepared copy of them gives, resident or streamed.
pub fn in_place_sessions(g: &Arc<Context>, plan: &Plan) {
    let b = g.backend();
    let (n, d, k, clusters, seed) = plan.session;
    let x = clustered(n, d, clusters, seed);
    let pick: Vec<usize> = (0..n).rev().collect();
    let view = sample_view(&x, d, &pick);
    let prepared = view.whole();
    let init = &prepared[..k * d];
    let streamed = b
        .memory_usage(true)
        .map(|(now, _)| (plan.stream_cap)(now, n, d));
    for cap in [Some(0), streamed].into_iter().flatten() {
        g.set_device_memory_cap(cap);
        let copy = session_run(
            b.kmeans_session(&prepared, d, Precision::Exact),
            init,
            &[],
            plan.session_steps.1,
        );
        let in_place = session_run(
            b.kmeans_session_in_place(view, Precision::Exact),
            init,
            &[],
            plan.session_steps.1,
        );
        g.set_device_memory_cap(0);
        same_sessions(plan, &copy, &in_place, &format!("cap {cap} in place"));
    }
}

/// One `#[test]` of each parity test for the backend that `$gpu()` opens (`$alone()` where
/// the test measures device memory and needs the device to itself), on `$plan()`.
#[macro_export]
macro_rules! parity_tests {
    ($gpu:ident, $alone:ident, $plan:ident) => {
        #[test]
        fn anchors_match_the_cpu() {
            let Some(g) = $gpu() else { return };
            common::parity::anchors(&g, &$plan());
        }

        #[test]
        fn codes_and_recall_match_the_cpu() {
            let Some(g) = $gpu() else { return };
            common::parity::codes_and_recall(&g, &$plan());
        }

        #[test]
        fn device_search_matches_the_host() {
            let Some(g) = $gpu() else { return };
            common::parity::device_search(&g, &$plan());
        }

        #[test]
        fn lists_probed_with_bounds_match_the_device() {
            let Some(g) = $gpu() else { return };
            common::bounded_probe_parity(&g);
        }

        #[test]
        fn four_bit_codes_and_wide_tables_are_scanned_on_the_device() {
            let Some(g) = $gpu() else { return };
            let p = $plan();
            common::wide_table_search_parity(&g, &p.base, &p.query);
        }

        #[test]
        fn filters_are_applied_in_the_device_scan() {
            let Some(g) = $gpu() else { return };
            let p = $plan();
            common::filtered_search_parity(&g, &p.base, &p.query);
        }

        #[test]
        fn assignment_matches_the_cpu_on_ragged_shapes() {
            let Some(g) = $gpu() else { return };
            common::ragged_assignment_parity(&g);
        }

        #[test]
        fn updates_match_the_cpu_with_many_anchors() {
            let Some(g) = $gpu() else { return };
            common::many_anchor_update_parity(&g);
        }

        #[test]
        fn cancelled_calls_leave_their_objects_as_they_were() {
            let Some(g) = $gpu() else { return };
            common::cancel_leaves_objects_as_they_were(&g);
        }

        #[test]
        fn streamed_sessions_match_resident_ones() {
            let Some(g) = $alone() else { return };
            common::parity::streamed_sessions(&g, &$plan());
        }

        #[test]
        fn in_place_sessions_match_prepared_ones() {
            let Some(g) = $alone() else { return };
            common::parity::in_place_sessions(&g, &$plan());
        }

        #[test]
        fn run_reports_name_every_fallback() {
            let Some(g) = $gpu() else { return };
            common::run_reports_name_every_fallback(&g, $plan().range_reason);
        }
    };
}
