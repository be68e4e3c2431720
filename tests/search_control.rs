//! Searches, range searches, loads and verifies under the caller's control: a progress
//! callback that cancels, a deadline, the context's timeout. Each stops within 50 ms of the
//! cancel or the deadline on the host with `Cancelled` or `TimedOut`, and leaves nothing.
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vlc_compress::progress::Control;
use vlc_compress::{Error, Index, Phase, Progress, Refine, SearchParams};

/// An index whose exhaustive search of a few thousand queries takes seconds on two threads.
fn slow_index(refine: Refine) -> (Index, Vec<f32>, usize) {
    let (n, d) = (100_000, 64);
    let x = common::clustered(n, d, 64, 21);
    let mut c = vlc_compress::Compressor::new(common::ctx(2), common::small_params(256, 16));
    c.train(&x[..20_000 * d], d).unwrap();
    let mut ix = c.new_index_with_refine(refine).unwrap();
    let ids: Vec<u64> = (0..n as u64).collect();
    ix.add(&x[..], &ids).unwrap();
    (ix, x, d)
}

/// Cancels at the first report of `phase` and records when.
struct CancelNow {
    phase: Phase,
    at: Mutex<Option<Instant>>,
}

impl Progress for CancelNow {
    fn report(&self, phase: Phase, _: u64, _: u64) -> bool {
        if phase != self.phase {
            return true;
        }
        self.at.lock().unwrap().get_or_insert_with(Instant::now);
        false
    }
}

/// How long after `since` the call `f` returned, with its error.
fn late<T: std::fmt::Debug>(f: impl FnOnce() -> vlc_compress::Result<T>) -> (Instant, Error) {
    let r = f();
    (Instant::now(), r.expect_err("the call ran to its end"))
}

/// A search under a given control, answering how many results it wrote.
type Run<'a> = &'a dyn Fn(&Control) -> vlc_compress::Result<usize>;

/// The smallest of three tries: the machine's other work can delay any one of them.
fn best_of_three(mut f: impl FnMut() -> Duration) -> Duration {
    (0..3).map(|_| f()).min().unwrap()
}

#[test]
fn searches_stop_within_50_ms_of_a_cancel_or_their_deadline() {
    let (ix, x, d) = slow_index(Refine::Bound);
    let q = &x[..4000 * d];
    let all = SearchParams {
        k: 10,
        nprobe: 256,
        rerank: 0,
    };
    let raw = vlc_compress::DenseRaw { data: &x, d };
    let each: [(&str, Run); 3] = [
        ("search", &|c| {
            ix.search_with(q, &all, None, None, c).map(|r| r.ids.len())
        }),
        ("range", &|c| {
            ix.range_search_with(q, 1e3, &all, None, None, c)
                .map(|r| r.ids.len())
        }),
        ("bounded", &|c| {
            let p = SearchParams { rerank: 50, ..all };
            ix.search_bounded_with(q, &p, Some(&raw), None, true, c)
                .map(|r| r.reranked.len())
        }),
    ];
    for (what, run) in each {
        let cancel = best_of_three(|| {
            let stop = CancelNow {
                phase: Phase::Search,
                at: Mutex::new(None),
            };
            let (end, e) = late(|| run(&Control::progress(&stop)));
            assert!(matches!(e, Error::Cancelled(_)), "{what}: {e:?}");
            let at = stop.at.lock().unwrap().expect("a report came");
            end - at
        });
        let deadline = best_of_three(|| {
            let t = Duration::from_millis(100);
            let start = Instant::now();
            let (end, e) = late(|| run(&Control::timeout(t)));
            assert!(matches!(e, Error::TimedOut(_)), "{what}: {e:?}");
            (end - start).saturating_sub(t)
        });
        eprintln!("{what}: returned {cancel:?} after the cancel, {deadline:?} after the deadline");
        assert!(
            cancel < Duration::from_millis(50),
            "{what}: {cancel:?} after the cancel"
        );
        assert!(
            deadline < Duration::from_millis(50),
            "{what}: {deadline:?} past the deadline"
        );
    }
    // The context's timeout stops a plain search; the same search without one ends.
    let ctx = ix.context().clone();
    ctx.set_timeout(Some(Duration::from_millis(50)));
    let r = ix.search(q, &all, None);
    assert!(matches!(r, Err(Error::TimedOut(_))), "{:?}", r.map(|r| r.k));
    ctx.set_timeout(None);
    let few = SearchParams { nprobe: 4, ..all };
    assert_eq!(ix.search(&q[..10 * d], &few, None).unwrap().ids.len(), 100);
}

/// Reports of a search come in queries answered, never going back, up to all of them; an
/// uncancelled watched search gives what an unwatched one gives.
#[test]
fn search_reports_count_queries_answered() {
    let demo = common::demo();
    let d = demo.base.cols;
    let ix = common::indexed(&common::ctx(2), common::small_params(64, 16), &demo.base);
    let q = &demo.query.data[..500 * d];
    let p = SearchParams::default();
    let heard = common::CancelAt::new(usize::MAX);
    let got = ix
        .search_with(q, &p, None, None, &Control::progress(&heard))
        .unwrap();
    assert_eq!(got, ix.search(q, &p, None).unwrap());
    let seen = heard.seen.lock().unwrap();
    assert!(seen.iter().all(|r| r.0 == Phase::Search && r.2 == 500));
    assert_eq!(seen.last().map(|r| r.1), Some(500));
    // The index's own callback hears its searches.
    drop(seen);
    let mut ix = ix;
    let own = Arc::new(common::CancelAt::new(0));
    ix.set_progress(Some(own.clone()));
    assert!(matches!(ix.search(q, &p, None), Err(Error::Cancelled(_))));
    assert!(own.count() > 0);
}

/// Loads and verifies check their checksums in pieces they report (`Phase::Verify`), and stop
/// at a cancel or a deadline, keeping nothing.
#[test]
fn loads_and_verifies_report_and_stop() {
    let (ix, _, _) = slow_index(Refine::F16);
    let path = std::env::temp_dir().join(format!("vlcc-control-{}.vlcc", std::process::id()));
    ix.save(&path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let ctx = common::ctx(2);
    for mmap in [false, true] {
        let heard = common::CancelAt::new(usize::MAX);
        Index::load_with(ctx.clone(), &path, mmap, false, &Control::progress(&heard)).unwrap();
        let seen = heard.seen.lock().unwrap();
        assert!(seen.iter().all(|r| r.0 == Phase::Verify && r.2 == size));
        assert!(seen.len() > 1, "{} reports", seen.len());
        let stop = common::CancelAt::new(0);
        let r = Index::load_with(ctx.clone(), &path, mmap, false, &Control::progress(&stop));
        assert!(
            matches!(r, Err(Error::Cancelled(_))),
            "{:?}",
            r.map(|i| i.len())
        );
    }
    let lazy = Index::load_deferred(ctx.clone(), &path).unwrap();
    let stop = common::CancelAt::new(1);
    assert!(matches!(
        lazy.verify_with(&Control::progress(&stop)),
        Err(Error::Cancelled(_))
    ));
    let past = Control {
        progress: None,
        deadline: Some(Instant::now()),
    };
    assert!(matches!(lazy.verify_with(&past), Err(Error::TimedOut(_))));
    lazy.verify().unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// On the CPU every call reports the CPU, nothing fallen back (the GPU suites check the
/// fallbacks with the same helper).
#[test]
fn cpu_calls_report_the_cpu() {
    common::run_reports_name_every_fallback(&common::ctx(2), vlc_compress::Fallbacks::NONE);
}
