//! Ctrl-C: the first SIGINT asks the running call to stop (through the context's progress
//! callback, so the library returns `Cancelled` with nothing half-written) and the command
//! exits with status 130; a second one kills the process at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use vlc_compress::{Context, Phase, Progress};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
    // Only async-signal-safe calls here: the next Ctrl-C gets the default action.
    // SAFETY: signal(2) is async-signal-safe; SIG_DFL is a valid disposition.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
}

/// Installs the handler (once, from `main`).
pub fn install() {
    let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic and calls signal(2).
    unsafe { libc::signal(libc::SIGINT, handler) };
}

/// Whether Ctrl-C was pressed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// A progress callback that only stops the call at Ctrl-C, for calls without a bar.
struct Stop;

impl Progress for Stop {
    fn report(&self, _: Phase, _: u64, _: u64) -> bool {
        !interrupted()
    }
}

/// Makes every long call on `ctx` stop at Ctrl-C (a bar set later does the same).
pub fn watch(ctx: &Context) {
    ctx.set_progress(Some(Arc::new(Stop)));
}
