//! Where a call's work ran: the context's backend, and each part of the call that a device
//! context answered on the host instead, with the reason. Each watched call (train, encode,
//! add, merge, the searches, load, verify) leaves its report on the calling thread, where
//! `last_run_report` reads it, as C reads its last error.

use crate::backend::BackendKind;
pub use crate::fallbacks::Fallbacks;
use std::cell::Cell;

/// Where one call ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The context's backend (never `Auto`: the one it opened).
    pub backend: BackendKind,
    /// The parts a device context answered on the host, by reason (none on the CPU, where
    /// the host is the device).
    pub fallbacks: Fallbacks,
}

impl RunReport {
    /// Whether every part ran where the context's backend runs.
    pub fn on_backend(&self) -> bool {
        self.fallbacks.is_empty()
    }
}

thread_local! {
    static LAST: Cell<Option<RunReport>> = const { Cell::new(None) };
}

/// The report of the last watched call made on this thread (train, encode, add, merge, a
/// search, range search or search with bounds, load, verify), whether it succeeded or not;
/// `None` before the first.
pub fn last_run_report() -> Option<RunReport> {
    LAST.with(|l| l.get())
}

/// Sets this thread's last report to `r`: for a binding that ran the call on a helper thread
/// and hands its report back to the caller's.
pub fn set_last_run_report(r: Option<RunReport>) {
    LAST.with(|l| l.set(r));
}

pub(crate) fn clear_last() {
    LAST.with(|l| l.set(None));
}

pub(crate) fn set_last(r: RunReport) {
    LAST.with(|l| l.set(Some(r)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::{vlcc_fallback, vlcc_fallback_str};

    /// The C names and bits are the Rust ones.
    #[test]
    fn c_fallbacks_match() {
        for (f, name) in Fallbacks::ALL {
            // SAFETY: a static NUL-terminated string.
            let c = unsafe { std::ffi::CStr::from_ptr(vlcc_fallback_str(f.0)) };
            assert_eq!(c.to_str().unwrap(), name);
        }
        assert_eq!(
            vlcc_fallback::NoRangeScan as u32,
            Fallbacks::NO_RANGE_SCAN.0
        );
        assert_eq!(
            Fallbacks(Fallbacks::ALL.iter().fold(0, |a, (f, _)| a | f.0))
                .names()
                .len(),
            9
        );
    }
}
