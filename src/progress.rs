//! Progress reports, cancellation and deadlines for the long calls (train, encode, add,
//! merge, search, range search, load, verify).
//!
//! A caller's [`Progress`] hears `(phase, done, total)` at steps of the work and answers
//! whether to go on. A `false` answer cancels: the call returns [`Error::Cancelled`] and
//! leaves every object as it was before the call. A deadline passed ends the call the same
//! way with [`Error::TimedOut`]. The library draws nothing itself.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Searching (top-k, bounds, range): `done` of `total` queries.
    Search = 4,
    /// Checking a file's checksums (load, verify): `done` of `total` bytes.
    Verify = 5,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Anchors => "anchors",
            Phase::Codebooks => "codebooks",
            Phase::Encode => "encode",
            Phase::Merge => "merge",
            Phase::Search => "search",
            Phase::Verify => "verify",
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

/// How one long call is watched: its own progress callback (else the object's, else the
/// context's) and its own deadline (else the context's timeout from the call's start).
#[derive(Clone, Copy, Default)]
pub struct Control<'a> {
    pub progress: Option<&'a dyn Progress>,
    pub deadline: Option<Instant>,
}

impl<'a> Control<'a> {
    /// A call that reports to `progress`.
    pub fn progress(progress: &'a dyn Progress) -> Control<'a> {
        Control {
            progress: Some(progress),
            deadline: None,
        }
    }

    /// A call that stops with `Error::TimedOut` once `timeout` has passed from now.
    pub fn timeout(timeout: Duration) -> Control<'a> {
        Control {
            progress: None,
            deadline: Instant::now().checked_add(timeout),
        }
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
    /// Past this, every check fails with `TimedOut`.
    deadline: Option<Instant>,
    /// Set with `stopped` where the deadline, not the caller, stopped the call.
    timed_out: AtomicBool,
    /// The parts of the call a device context answered on the host.
    fallbacks: crate::fallbacks::Recorder,
}

/// How long `poll` lets pass between reports from inside a long step: a cancel is heard
/// within about this (and a step between two polls).
const POLL_EVERY_MICROS: u64 = 10_000;

impl<'a> Watch<'a> {
    pub fn new(progress: &'a dyn Progress) -> Watch<'a> {
        Watch {
            progress,
            stopped: AtomicBool::new(false),
            at: Mutex::new((Phase::Anchors, 0, 0)),
            listening: true,
            last: AtomicU64::new(0),
            born: Instant::now(),
            deadline: None,
            timed_out: AtomicBool::new(false),
            fallbacks: Default::default(),
        }
    }

    /// Notes that part of the call ran on the host instead of the device, and why (nothing
    /// for `Fallbacks::NONE`).
    pub fn fell_back(&self, why: crate::fallbacks::Fallbacks) {
        self.fallbacks.add(why)
    }

    /// This watch, failing every check with `TimedOut` past `deadline` (if any).
    pub fn until(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
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

    /// The parts of the call that fell back to the host so far, by reason.
    pub fn fallbacks(&self) -> crate::fallbacks::Fallbacks {
        self.fallbacks.get()
    }

    /// Sets the position to the start of `phase` (of `total`) without a report, unless it is
    /// already in `phase`: what `poll` reports before the first step ends.
    pub fn begin(&self, phase: Phase, total: usize) {
        let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
        if at.0 != phase {
            *at = (phase, 0, total);
        }
    }

    /// Reports `done` of `total` in `phase`; `Err(Cancelled)` once the caller said stop.
    pub fn report(&self, phase: Phase, done: usize, total: usize) -> Result<()> {
        self.moved(|at| *at = (phase, done, total))
    }

    /// Adds `by` to the position in `phase` (of `total`) and reports it, for work done in
    /// pieces on several threads: the position only grows.
    pub fn advance(&self, phase: Phase, by: usize, total: usize) -> Result<()> {
        self.moved(|at| {
            let done = if at.0 == phase { at.1 } else { 0 };
            *at = (phase, done + by, total)
        })
    }

    /// Moves the position as `step` says and reports it, under the lock.
    fn moved(&self, step: impl FnOnce(&mut (Phase, usize, usize))) -> Result<()> {
        self.check_deadline()?;
        if self.listening {
            let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
            // Another thread may have stopped the call while this one waited: once stopped,
            // the callback hears nothing more.
            self.check()?;
            step(&mut at);
            let (phase, done, total) = *at;
            self.last.store(self.micros(), Ordering::Relaxed);
            if !self.progress.report(phase, done as u64, total as u64) {
                self.stopped.store(true, Ordering::Relaxed);
            }
        }
        self.check()
    }

    /// From inside a long step, on any thread: checks the deadline, and once
    /// `POLL_EVERY_MICROS` have passed since the last report, reports the last position again
    /// (so that the caller may cancel before the step ends); else only checks.
    pub fn poll(&self) -> Result<()> {
        self.check()?;
        if !self.listening && self.deadline.is_none() {
            return Ok(());
        }
        let (now, last) = (self.micros(), self.last.load(Ordering::Relaxed));
        self.check_deadline()?;
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

    /// `Err(TimedOut)` once the deadline has passed (and from then on, on every check).
    fn check_deadline(&self) -> Result<()> {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.timed_out.store(true, Ordering::Relaxed);
            self.stopped.store(true, Ordering::Relaxed);
        }
        self.check()
    }

    /// `Err(Cancelled)` if the caller said stop (`Err(TimedOut)` if the deadline passed),
    /// without a report.
    pub fn check(&self) -> Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            if self.timed_out.load(Ordering::Relaxed) {
                return Err(Error::TimedOut("the call's deadline passed".into()));
            }
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
