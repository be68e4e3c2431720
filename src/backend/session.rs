//! Search as a session at the seam: for one call, the index asks its backend once for a
//! searcher over a codebook view and a lists view. The answer is a device searcher, with the
//! codebook and lists resident for its life, that then answers every part of the call it was
//! opened for; or the host scan, with the reasons a device left the call there. Nothing asks
//! again halfway.

use super::{Caps, CodebookView, DeviceRerank, ListsView, Poll, Probes, RangeHits};
use crate::error::Result;
use crate::fallbacks::Fallbacks;

/// What a search will ask of its searcher, known when it opens.
#[derive(Clone, Copy, Debug)]
pub struct SearchJob {
    /// Lists each query probes (the one clamp, `Probes::of`).
    pub probes: Probes,
    /// Candidates kept per query: k or the re-rank depth (1 for a range search).
    pub want: usize,
    /// A range search rather than top-k.
    pub range: bool,
    /// Its filter is host code (a predicate), which a device scan cannot ask.
    pub host_filter: bool,
    /// The candidates are re-ranked against these rows in device memory (`top_k_reranked`).
    pub rerank: Option<DeviceRerank>,
}

/// A backend's answer to a search: who answers it, decided once.
pub enum Session<'a> {
    /// The device answers, through the searcher.
    Device(Box<dyn Searcher + 'a>),
    /// The host scan answers; the reasons a device left it (none on the CPU).
    Host(Fallbacks),
}

/// A device searcher opened for one search (`Backend::searcher`): the codebook and lists are
/// on the device for its life, and every call it was opened for runs there. Queries are
/// prepared for the metric; `allow` is bit `i % 32` of word `i / 32` for the vector at
/// position i of the lists back to back (`ListsView::flatten`'s order); `poll` is asked
/// between batches of queries, and its error (a cancel, a deadline) stops the work.
pub trait Searcher {
    /// For each query, the job's `want` best candidates: ids, then scores (squared L2, or
    /// minus the inner product), sorted, missing ones with id `u64::MAX`.
    fn top_k(
        &mut self,
        q: &[f32],
        allow: Option<&[u32]>,
        poll: Poll,
    ) -> Result<(Vec<u64>, Vec<f32>)>;

    /// For each query, every vector of its probed lists scoring at most `radius`: each
    /// query's hit count, then the ids and scores query after query, unordered within a
    /// query. More than `most_hits` in all is an `OutOfMemory`, found before they are copied
    /// to the host.
    fn range(
        &mut self,
        q: &[f32],
        radius: f32,
        allow: Option<&[u32]>,
        most_hits: usize,
        poll: Poll,
    ) -> Result<RangeHits>;

    /// `top_k`, each query's candidates re-scored exactly against the job's rows in device
    /// memory and cut to its `rerank.k` best, without leaving the device.
    ///
    /// # Safety
    /// Nothing writes those rows while the call runs.
    unsafe fn top_k_reranked(&mut self, q: &[f32], poll: Poll) -> Result<(Vec<u64>, Vec<f32>)>;
}

/// Why a device with `caps` leaves `job` over these lists to the host (`NONE` where its scan
/// takes it, and on the host itself): the one fit decision of a search, before residency.
pub fn declines(caps: Caps, cb: &CodebookView, lists: &ListsView, job: &SearchJob) -> Fallbacks {
    if !caps.list_search {
        return Fallbacks::NONE;
    }
    if job.range && !caps.range_search {
        return Fallbacks::NO_RANGE_SCAN;
    }
    let why = caps.declines(cb, lists, job.want);
    if job.host_filter {
        why | Fallbacks::PREDICATE_FILTER
    } else {
        why
    }
}

/// The error of a searcher asked for what it was not opened for: the caller's bug.
pub(crate) fn not_opened_for(what: &str) -> crate::error::Error {
    crate::error::Error::Device(format!("the device searcher was not opened for {what}"))
}
