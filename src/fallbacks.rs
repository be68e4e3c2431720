//! The reasons a device backend leaves part of a call to the host: what `Caps::declines`
//! answers and a call's run report lists.

use std::sync::atomic::{AtomicU32, Ordering};

/// Reasons a device context did part of a call on the host, as bits (C `vlcc_fallback`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fallbacks(pub u32);

impl Fallbacks {
    /// Nothing fell back.
    pub const NONE: Fallbacks = Fallbacks(0);
    /// A predicate filter is the caller's host code: the lists were scanned on the host.
    pub const PREDICATE_FILTER: Fallbacks = Fallbacks(1);
    /// More candidates per query than a device scan keeps (128).
    pub const TOO_MANY_CANDIDATES: Fallbacks = Fallbacks(1 << 1);
    /// A list's lookup table is larger than the device scan takes.
    pub const SCAN_TABLE_TOO_LARGE: Fallbacks = Fallbacks(1 << 2);
    /// The lists' precomputed L2 terms would pass 512 MiB, so they were not made, and the
    /// device scan needs them.
    pub const LIST_TERMS_TOO_LARGE: Fallbacks = Fallbacks(1 << 3);
    /// Codes of a width the device scan does not read.
    pub const CODE_WIDTH: Fallbacks = Fallbacks(1 << 4);
    /// More vectors than the device scan's 32-bit offsets reach.
    pub const TOO_MANY_VECTORS: Fallbacks = Fallbacks(1 << 5);
    /// The device declined the lists: they did not fit its memory or the context's device
    /// memory cap, the upload failed, or they pass one of its binding limits.
    pub const DEVICE_DECLINED: Fallbacks = Fallbacks(1 << 6);
    /// The certified re-rank (`rerank_auto`) scans its candidates on the host.
    pub const CERTIFIED_RERANK: Fallbacks = Fallbacks(1 << 7);
    /// The backend has no range scan (WGPU): range searches scan on the host.
    pub const NO_RANGE_SCAN: Fallbacks = Fallbacks(1 << 8);

    /// Every reason with its name, in bit order.
    pub const ALL: [(Fallbacks, &'static str); 9] = [
        (Fallbacks::PREDICATE_FILTER, "predicate_filter"),
        (Fallbacks::TOO_MANY_CANDIDATES, "too_many_candidates"),
        (Fallbacks::SCAN_TABLE_TOO_LARGE, "scan_table_too_large"),
        (Fallbacks::LIST_TERMS_TOO_LARGE, "list_terms_too_large"),
        (Fallbacks::CODE_WIDTH, "code_width"),
        (Fallbacks::TOO_MANY_VECTORS, "too_many_vectors"),
        (Fallbacks::DEVICE_DECLINED, "device_declined"),
        (Fallbacks::CERTIFIED_RERANK, "certified_rerank"),
        (Fallbacks::NO_RANGE_SCAN, "no_range_scan"),
    ];

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, other: Fallbacks) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the reasons set, in bit order.
    pub fn names(self) -> Vec<&'static str> {
        Fallbacks::ALL
            .iter()
            .filter(|(f, _)| self.contains(*f))
            .map(|(_, n)| *n)
            .collect()
    }
}

impl std::ops::BitOr for Fallbacks {
    type Output = Fallbacks;
    fn bitor(self, o: Fallbacks) -> Fallbacks {
        Fallbacks(self.0 | o.0)
    }
}

/// A call's fallbacks as they happen, from any of its threads.
#[derive(Default)]
pub(crate) struct Recorder(AtomicU32);

impl Recorder {
    pub fn add(&self, f: Fallbacks) {
        self.0.fetch_or(f.0, Ordering::Relaxed);
    }

    pub fn get(&self) -> Fallbacks {
        Fallbacks(self.0.load(Ordering::Relaxed))
    }
}
