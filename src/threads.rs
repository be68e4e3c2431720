//! A context's thread pool, whose threads have ended when it is dropped: a host that frees
//! a context and then unloads the library leaves no thread of ours running its code, and no
//! thread's state outlives the free (which leak checkers at process exit saw as leaked).

use crate::error::{Error, Result};
use std::thread::JoinHandle;

pub(crate) struct Threads {
    pool: Option<rayon::ThreadPool>,
    handles: Vec<JoinHandle<()>>,
}

impl Threads {
    /// `threads` threads (0: one per core), named `vlcc-<i>`.
    pub fn new(threads: usize) -> Result<Threads> {
        let mut handles = Vec::new();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .spawn_handler(|t| {
                let mut b = std::thread::Builder::new().name(format!("vlcc-{}", t.index()));
                if let Some(size) = t.stack_size() {
                    b = b.stack_size(size);
                }
                let h = b.spawn(|| t.run())?;
                handles.push(h);
                Ok(())
            })
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start {threads} threads: {e}")))?;
        Ok(Threads {
            pool: Some(pool),
            handles,
        })
    }
}

impl std::ops::Deref for Threads {
    type Target = rayon::ThreadPool;
    fn deref(&self) -> &rayon::ThreadPool {
        self.pool.as_ref().expect("the pool lives until drop")
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else { return };
        // Dropped on one of its own threads (the last owner let go inside a task), a join
        // would wait for itself: those threads end on their own, as rayon's do.
        let inside = pool.current_thread_index().is_some();
        drop(pool);
        if inside {
            return;
        }
        for h in self.handles.drain(..) {
            // A thread that panicked has ended too: nothing to report at a drop.
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Threads;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the pool threads whose thread-local state has been torn down: the last thing
    /// a thread does before it ends.
    static ENDED: AtomicUsize = AtomicUsize::new(0);
    struct OnEnd;
    impl Drop for OnEnd {
        fn drop(&mut self) {
            ENDED.fetch_add(1, Ordering::SeqCst);
        }
    }
    thread_local! {
        static MARK: OnEnd = const { OnEnd };
    }

    #[test]
    fn no_thread_of_a_pool_outlives_its_drop() {
        for round in 1..=20 {
            let t = Threads::new(3).unwrap();
            t.broadcast(|_| MARK.with(|_| ()));
            drop(t);
            let ended = ENDED.load(Ordering::SeqCst);
            assert_eq!(ended, 3 * round, "threads still running after the drop");
        }
    }
}
