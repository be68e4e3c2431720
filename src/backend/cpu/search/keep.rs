//! Where a scan's scored vectors go: the best k (`TopK`) or all within a radius (`Within`).

use crate::error::{Error, Result};
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Candidate ordered by (distance, id): the heap's top is the worst kept.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct Cand(pub(crate) f32, pub(crate) u64);
impl Eq for Cand {}
impl PartialOrd for Cand {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Cand {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}

/// Where a scan's scored vectors go: the best k (`TopK`), or all within a radius (`Within`).
pub(crate) trait Keep {
    /// Scores above this are not kept (smaller is better).
    fn bound(&self) -> f32;
    /// Offers a score no larger than `bound()`.
    fn keep(&mut self, d: f32, id: u64);
}

impl Keep for TopK {
    #[inline(always)]
    fn bound(&self) -> f32 {
        self.worst
    }
    #[inline(always)]
    fn keep(&mut self, d: f32, id: u64) {
        self.push(d, id)
    }
}

/// Host bytes a range search's hits may take, shared by all its queries: what the memory
/// cap leaves beside its working memory (`usize::MAX` without a cap).
pub(crate) struct HitRoom(std::sync::atomic::AtomicUsize);

/// What a hit costs while the call runs: its candidate (16 bytes), then its id and distance
/// in the results (12), made before the candidates go.
pub(crate) const HIT_BYTES: usize = 28;

impl HitRoom {
    pub(crate) fn new(bytes: usize) -> HitRoom {
        HitRoom(bytes.into())
    }

    /// Hits that fit.
    pub(crate) fn hits(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed) / HIT_BYTES
    }

    /// Takes room for `n` more hits; false (and nothing taken) where it does not fit.
    fn take(&self, n: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let bytes = n.saturating_mul(HIT_BYTES);
        self.0
            .fetch_update(Relaxed, Relaxed, |left| match left {
                usize::MAX => Some(left),
                _ => left.checked_sub(bytes),
            })
            .is_ok()
    }
}

/// Every scored vector within `radius` (a range search's sink). Room for more hits comes
/// from the call's `HitRoom` as the list grows; where it or an allocation runs out, the
/// keeping stops and `hits` reports it.
pub(crate) struct Within<'a> {
    radius: f32,
    hits: Vec<Cand>,
    room: &'a HitRoom,
    full: bool,
}

impl<'a> Within<'a> {
    pub(crate) fn new(radius: f32, room: &'a HitRoom) -> Within<'a> {
        Within {
            radius,
            hits: Vec::new(),
            room,
            full: false,
        }
    }

    /// What was kept, or `OutOfMemory` where it did not fit.
    pub(crate) fn hits(self) -> Result<Vec<Cand>> {
        if self.full {
            return Err(Error::OutOfMemory(format!(
                "range search: more hits than fit in memory or under the context's memory \
                 cap ({} for one query when it stopped, {HIT_BYTES} bytes each)",
                self.hits.len()
            )));
        }
        Ok(self.hits)
    }
}

impl Keep for Within<'_> {
    #[inline(always)]
    fn bound(&self) -> f32 {
        if self.full {
            f32::NEG_INFINITY
        } else {
            self.radius
        }
    }
    #[inline(always)]
    fn keep(&mut self, d: f32, id: u64) {
        if self.hits.len() == self.hits.capacity() {
            let more = self.hits.capacity().max(8);
            if !self.room.take(more) || self.hits.try_reserve_exact(more).is_err() {
                self.full = true;
                return;
            }
        }
        self.hits.push(Cand(d, id))
    }
}

pub(crate) struct TopK {
    k: usize,
    heap: BinaryHeap<Cand>,
    pub(crate) worst: f32,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
            worst: f32::INFINITY,
        }
    }
    #[inline]
    pub(crate) fn push(&mut self, d: f32, id: u64) {
        if d > self.worst {
            return;
        }
        let c = Cand(d, id);
        if self.heap.len() < self.k {
            self.heap.push(c);
        } else if c < *self.heap.peek().unwrap() {
            self.heap.pop();
            self.heap.push(c);
        } else {
            return;
        }
        if self.heap.len() == self.k {
            self.worst = self.heap.peek().unwrap().0;
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
    pub(crate) fn sorted(self) -> Vec<Cand> {
        self.heap.into_sorted_vec()
    }
}
