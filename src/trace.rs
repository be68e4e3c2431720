//! Step timings: with a sink given (`BackendOptions::trace_device`, `trace_host`), each step
//! is timed, and the totals go to the sink when the trace ends: where the time goes, without
//! a profiler.

use std::sync::Arc;
use std::time::Instant;

/// Receives one line per timed step when a trace ends (`"cuda trace  anchors:  1.234 ms"`).
pub type TraceSink = Arc<dyn Fn(&str) + Send + Sync>;

pub(crate) struct Trace {
    name: &'static str,
    sink: Option<TraceSink>,
    last: Option<Instant>,
    spent: Vec<(&'static str, f64)>,
}

impl Trace {
    /// A trace that records only when it has a `sink`; `name` prefixes its lines.
    pub fn new(name: &'static str, sink: Option<&TraceSink>) -> Trace {
        Trace {
            name,
            sink: sink.cloned(),
            last: sink.is_some().then(Instant::now),
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

    /// Sends a line of its own to the sink, if any.
    #[cfg_attr(not(feature = "wgpu"), allow(dead_code))]
    pub fn note(&self, line: impl FnOnce() -> String) {
        if let Some(s) = &self.sink {
            s(&format!("{} trace {}", self.name, line()));
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let Some(sink) = &self.sink else { return };
        let total: f64 = self.spent.iter().map(|(_, t)| t).sum();
        for (n, t) in self.spent.iter().chain([&("total", total)]) {
            sink(&format!("{} trace {n:>16}: {:9.3} ms", self.name, t * 1e3));
        }
    }
}
