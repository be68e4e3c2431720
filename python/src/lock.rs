//! The locks of the Python objects. They are taken with the GIL released, so a waiting thread
//! never holds up Python (whose callbacks the holder may be waiting to run); and from inside a
//! callback of a call, which may hold the very lock, they are never waited for: a callback
//! that would change the object its call is using, or read it while it changes, gets an
//! `InvalidStateError` instead of a deadlock.

use crate::errors::raise;
use pyo3::prelude::*;
use std::cell::Cell;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};
use vlc_compress::ffi::status::vlcc_status;

thread_local! {
    /// Python callbacks of the library's calls running on this thread now.
    static IN_CALLBACK: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f`, a call into a Python callback of a library call, marked as such on this thread.
pub fn as_callback<T>(f: impl FnOnce() -> T) -> T {
    struct Mark;
    impl Drop for Mark {
        fn drop(&mut self) {
            IN_CALLBACK.with(|c| c.set(c.get() - 1));
        }
    }
    IN_CALLBACK.with(|c| c.set(c.get() + 1));
    let _mark = Mark;
    f()
}

fn in_callback() -> bool {
    IN_CALLBACK.with(|c| c.get() > 0)
}

/// A Python object's state behind its lock; `what` names it in errors ("index").
pub struct Locked<T> {
    lock: RwLock<T>,
    what: &'static str,
}

impl<T: Send + Sync> Locked<T> {
    pub fn new(v: T, what: &'static str) -> Self {
        Locked {
            lock: RwLock::new(v),
            what,
        }
    }

    /// Shared access (searches, reads).
    pub fn read(&self, py: Python<'_>) -> PyResult<RwLockReadGuard<'_, T>> {
        loop {
            match self.lock.try_read() {
                Ok(g) => return Ok(g),
                Err(TryLockError::Poisoned(e)) => return Ok(e.into_inner()),
                Err(TryLockError::WouldBlock) if in_callback() => return Err(self.busy()),
                // Waits with the GIL released, then tries again under it.
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.lock.read())),
            }
        }
    }

    /// Exclusive access (training, adding, removing, merging).
    pub fn write(&self, py: Python<'_>) -> PyResult<RwLockWriteGuard<'_, T>> {
        loop {
            match self.lock.try_write() {
                Ok(g) => return Ok(g),
                Err(TryLockError::Poisoned(e)) => return Ok(e.into_inner()),
                Err(TryLockError::WouldBlock) if in_callback() => return Err(self.busy()),
                Err(TryLockError::WouldBlock) => py.detach(|| drop(self.lock.write())),
            }
        }
    }

    fn busy(&self) -> PyErr {
        Python::attach(|py| {
            raise(
                py,
                vlcc_status::InvalidState as u32,
                format!(
                    "this {} is in use by the call whose callback is running: a callback may \
                     not change it, or use it while it changes",
                    self.what
                ),
            )
        })
    }
}
