//! Step timings: with a variable set (`VLCC_CUDA_TRACE`, `VLCC_WGPU_TRACE` for the GPU
//! backends' device steps, `VLCC_TRAIN_TRACE` for the training loop's calls on the host), each
//! step is timed, and the totals are printed when the trace ends: where the time goes,
//! without a profiler.

use std::time::Instant;

pub(crate) struct Trace {
    name: &'static str,
    last: Option<Instant>,
    spent: Vec<(&'static str, f64)>,
}

impl Trace {
    /// A trace that records only when `var` is set; `name` prefixes its lines.
    pub fn new(name: &'static str, var: &str) -> Trace {
        Trace {
            name,
            last: std::env::var_os(var).is_some().then(Instant::now),
            spent: Vec::new(),
        }
    }

    /// Whether this trace records (only the WGPU backend asks).
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn recording(&self) -> bool {
        self.last.is_some()
    }

    /// Ends a step: when recording, `wait` runs (a device trace waits for the device there)
    /// and the time since the last step is added to `step`.
    pub fn mark(&mut self, step: &'static str, wait: impl FnOnce()) {
        let Some(last) = self.last else { return };
        wait();
        let now = Instant::now();
        let dt = (now - last).as_secs_f64();
        match self.spent.iter_mut().find(|(n, _)| *n == step) {
            Some((_, t)) => *t += dt,
            None => self.spent.push((step, dt)),
        }
        self.last = Some(now);
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if self.last.is_some() {
            let total: f64 = self.spent.iter().map(|(_, t)| t).sum();
            for (n, t) in &self.spent {
                eprintln!("{} trace {n:>16}: {:9.3} ms", self.name, t * 1e3);
            }
            eprintln!(
                "{} trace {:>16}: {:9.3} ms",
                self.name,
                "total",
                total * 1e3
            );
        }
    }
}
