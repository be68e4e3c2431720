//! The id map: where each id's vectors sit (list, row), so that access by id and removal touch
//! only the rows they name. It is derived from the lists, never stored: built by the first call
//! that needs it, then kept by every change (add, remove, merge) while it exists; a loaded file
//! builds it again on first need.

use crate::error::{Error, Result};
use std::collections::HashMap;

/// Where one vector sits: list and row within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub list: u32,
    pub row: u32,
}

#[derive(Debug, Default)]
pub(crate) struct IdMap {
    /// One location of every id held.
    first: HashMap<u64, Loc>,
    /// The further locations of ids held more than once (ids need not be unique; rare).
    more: HashMap<u64, Vec<Loc>>,
}

fn too_long(list: usize) -> Error {
    Error::OutOfMemory(format!(
        "id map: list {list} would hold more than {} vectors",
        u32::MAX
    ))
}

impl IdMap {
    /// Heap bytes held, about: hashbrown keeps one control byte per bucket beside each entry.
    pub fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u64, Loc)>() + 1;
        let more: usize = self.more.values().map(|v| v.capacity() * 8).sum();
        self.first.capacity() * entry
            + self.more.capacity() * (std::mem::size_of::<(u64, Vec<Loc>)>() + 1)
            + more
    }

    /// Heap bytes a map of `n` distinct ids takes at most: hashbrown's buckets, a power of
    /// two at least 8/7 of the entries.
    pub fn bytes_for(n: usize) -> usize {
        let buckets = n.saturating_mul(8).div_ceil(7).checked_next_power_of_two();
        let entry = std::mem::size_of::<(u64, Loc)>() + 1;
        buckets.map_or(usize::MAX, |b| b.saturating_mul(entry))
    }

    /// The map of `nlist` lists, `ids(j)` giving list j's ids. Allocated fallibly.
    pub fn build<'a>(nlist: usize, ids: impl Fn(usize) -> &'a [u64]) -> Result<IdMap> {
        let n: usize = (0..nlist).map(|j| ids(j).len()).sum();
        let mut map = IdMap::default();
        map.reserve(n)?;
        for j in 0..nlist {
            let list = u32::try_from(j).map_err(|_| too_long(j))?;
            for (r, &id) in ids(j).iter().enumerate() {
                let row = u32::try_from(r).map_err(|_| too_long(j))?;
                map.insert(id, Loc { list, row });
            }
        }
        Ok(map)
    }

    /// Room for `n` more ids, so that the inserts of one change cannot fail halfway.
    pub fn reserve(&mut self, n: usize) -> Result<()> {
        self.first
            .try_reserve(n)
            .map_err(|_| Error::OutOfMemory(format!("id map: room for {n} more ids")))
    }

    /// The location of row `row` of list `list`, checked to fit the map's 32-bit fields.
    pub fn loc(list: usize, row: usize) -> Result<Loc> {
        match (u32::try_from(list), u32::try_from(row)) {
            (Ok(list), Ok(row)) => Ok(Loc { list, row }),
            _ => Err(too_long(list)),
        }
    }

    /// Records `id` at `at`; an id already held keeps its first location, the new one goes to
    /// `more`, so `locations` lists them in insertion order.
    pub fn insert(&mut self, id: u64, at: Loc) {
        match self.first.entry(id) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(at);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.more.entry(id).or_default().push(at)
            }
        }
    }

    /// Every location of `id`, the first inserted first.
    pub fn locations(&self, id: u64) -> impl Iterator<Item = Loc> + '_ {
        let more = self.more.get(&id).map_or(&[][..], |v| v.as_slice());
        self.first
            .get(&id)
            .copied()
            .into_iter()
            .chain(more.iter().copied())
    }

    pub fn contains(&self, id: u64) -> bool {
        self.first.contains_key(&id)
    }

    /// Takes one location of `id` out of the map (the last inserted), if any.
    pub fn take(&mut self, id: u64) -> Option<Loc> {
        if let Some(v) = self.more.get_mut(&id) {
            let at = v.pop();
            if v.is_empty() {
                self.more.remove(&id);
            }
            return at;
        }
        self.first.remove(&id)
    }

    /// Records that the vector of `id` at `from` now sits at `to`.
    pub fn moved(&mut self, id: u64, from: Loc, to: Loc) {
        if let Some(at) = self.first.get_mut(&id).filter(|at| **at == from) {
            *at = to;
        } else if let Some(at) = self
            .more
            .get_mut(&id)
            .and_then(|v| v.iter_mut().find(|at| **at == from))
        {
            *at = to;
        }
    }
}
