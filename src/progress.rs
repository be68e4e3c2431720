//! Progress reports and cancellation for the long calls (train, encode, add, merge).
//!
//! A caller's [`Progress`] hears `(phase, done, total)` at steps of the work and answers
//! whether to go on. A `false` answer cancels: the call returns [`Error::Cancelled`] and
//! leaves every object as it was before the call. The library draws nothing itself.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The steps of long work a report names (numbers are the C ABI's `vlcc_phase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Training the anchors: `done` of `total` iterations.
    Anchors = 0,
    /// Training the residual codebooks (rotation and sub-quantizers): `done` of `total`
    /// sub-quantizer fits.
    Codebooks = 1,
    /// Encoding vectors (encode, add): `done` of `total` rows.
    Encode = 2,
    /// Merging another index in: `done` of `total` lists.
    Merge = 3,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Anchors => "anchors",
            Phase::Codebooks => "codebooks",
            Phase::Encode => "encode",
            Phase::Merge => "merge",
        }
    }
}

/// Hears progress and decides whether the work goes on: `report` returns `false` to cancel.
/// Reports come from the calling thread or from the library's worker threads, one at a time
/// per call; `done` never decreases within a phase, and the same position may repeat.
pub trait Progress: Sync {
    fn report(&self, phase: Phase, done: u64, total: u64) -> bool;
}

/// Reports nothing and never cancels.
pub struct NoProgress;

impl Progress for NoProgress {
    fn report(&self, _: Phase, _: u64, _: u64) -> bool {
        true
    }
}

impl<F: Fn(Phase, u64, u64) -> bool + Sync> Progress for F {
    fn report(&self, phase: Phase, done: u64, total: u64) -> bool {
        self(phase, done, total)
    }
}

/// A progress callback an object or context keeps for its calls.
pub type SharedProgress = Arc<dyn Progress + Send>;

/// The progress callback an object keeps, if any (`set_progress`).
#[derive(Clone, Default)]
pub(crate) struct Listener(pub Option<SharedProgress>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

impl Listener {
    /// This object's callback, else its context's.
    pub fn or_context(&self, ctx: &crate::Context) -> Option<SharedProgress> {
        self.0.clone().or_else(|| ctx.progress())
    }
}

/// Runs `f` with a watch on `progress`, or on none: without a listener, work is not split
/// into reporting steps.
pub(crate) fn watching<R>(progress: Option<&SharedProgress>, f: impl FnOnce(&Watch) -> R) -> R {
    match progress {
        Some(p) => f(&Watch::new(&**p)),
        None => f(&Watch::none()),
    }
}

/// One call's view of its caller's `Progress`: reports go through one at a time, and once
/// cancelled every later check fails too, on every thread of the call.
pub(crate) struct Watch<'a> {
    progress: &'a dyn Progress,
    stopped: AtomicBool,
    /// The last position reported, which `poll` reports again; held through each report, so
    /// reports from worker threads go one at a time (callers need not make theirs reentrant).
    at: Mutex<(Phase, usize, usize)>,
    /// Whether anyone listens: without, work need not be split into reporting steps.
    listening: bool,
    /// When the last report went out, in microseconds since `born`.
    last: AtomicU64,
    born: Instant,
}

/// How long `poll` lets pass between reports from inside a long step.
const POLL_EVERY_MICROS: u64 = 50_000;

impl<'a> Watch<'a> {
    pub fn new(progress: &'a dyn Progress) -> Watch<'a> {
        Watch {
            progress,
            stopped: AtomicBool::new(false),
            at: Mutex::new((Phase::Anchors, 0, 0)),
            listening: true,
            last: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    /// A watch with no listener: reports go nowhere and nothing cancels.
    pub fn none() -> Watch<'static> {
        Watch {
            listening: false,
            ..Watch::new(&NoProgress)
        }
    }

    pub fn listening(&self) -> bool {
        self.listening
    }

    /// Reports `done` of `total` in `phase`; `Err(Cancelled)` once the caller said stop.
    pub fn report(&self, phase: Phase, done: usize, total: usize) -> Result<()> {
        self.check()?;
        if self.listening {
            let go = {
                let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
                *at = (phase, done, total);
                self.last.store(self.micros(), Ordering::Relaxed);
                self.progress.report(phase, done as u64, total as u64)
            };
            if !go {
                self.stopped.store(true, Ordering::Relaxed);
            }
        }
        self.check()
    }

    /// From inside a long step, on any thread: once `POLL_EVERY_MICROS` have passed since the
    /// last report, reports the last position again (so that the caller may cancel before
    /// the step ends); else only checks.
    pub fn poll(&self) -> Result<()> {
        self.check()?;
        let (now, last) = (self.micros(), self.last.load(Ordering::Relaxed));
        if !self.listening || now.saturating_sub(last) < POLL_EVERY_MICROS {
            return Ok(());
        }
        // One thread re-reports; the others go on.
        if self
            .last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return Ok(());
        }
        let (phase, done, total) = *self.at.lock().unwrap_or_else(|e| e.into_inner());
        self.report(phase, done, total)
    }

    fn micros(&self) -> u64 {
        self.born.elapsed().as_micros() as u64
    }

    /// `Err(Cancelled)` if the caller said stop, without a report.
    pub fn check(&self) -> Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(Error::Cancelled(
                "the progress callback asked to stop".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_false_answer_cancels_every_later_check() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let p = |_: Phase, done: u64, _: u64| {
            calls.fetch_add(1, Ordering::Relaxed);
            done < 2
        };
        let w = Watch::new(&p);
        assert!(w.report(Phase::Encode, 1, 4).is_ok());
        assert!(matches!(
            w.report(Phase::Encode, 2, 4),
            Err(Error::Cancelled(_))
        ));
        assert!(matches!(w.check(), Err(Error::Cancelled(_))));
        // Once stopped, the callback is not asked again.
        assert!(w.report(Phase::Encode, 3, 4).is_err());
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        assert!(Watch::none().report(Phase::Merge, 0, 1).is_ok());
    }
}
