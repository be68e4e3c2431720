//! Inverted lists as a file holds them: in memory, or used in place from a memory map until a
//! change copies the one list it touches.

use crate::error::{Error, Result};
use std::ops::Range;

/// One list held in memory: the ids, the codes (the residual code size each) and the
/// refinement rows (their size each; empty where the index keeps none) of its vectors.
#[derive(Clone, Debug, Default)]
pub(crate) struct List {
    pub ids: Vec<u64>,
    pub codes: Vec<u8>,
    pub refine: Vec<u8>,
}

/// An index's lists. Each is held in memory, or (after a memory-mapped load, until a change
/// touches it) read in place from the file's map: a change copies only the lists it touches.
#[derive(Debug)]
pub(crate) struct Lists {
    /// Per list: `Some` where held in memory, `None` where read from `mapped`.
    held: Vec<Option<List>>,
    mapped: Option<MappedLists>,
}

impl Lists {
    /// `m` empty lists.
    pub fn empty(m: usize) -> Result<Lists> {
        Ok(Lists {
            held: crate::error::try_vec(m, Some(List::default()), "index lists")?,
            mapped: None,
        })
    }

    /// Lists held in memory.
    pub fn held(lists: Vec<List>) -> Lists {
        Lists {
            held: lists.into_iter().map(Some).collect(),
            mapped: None,
        }
    }

    /// Every list read in place from `m`.
    pub fn mapped(m: MappedLists) -> Result<Lists> {
        Ok(Lists {
            held: crate::error::try_vec(m.offsets.len() - 1, None, "index lists")?,
            mapped: Some(m),
        })
    }

    /// Checks the checksums of a mapped file's sections (all of them: a deferred load left the
    /// bulk ones out). Lists held in memory have none to check.
    pub(crate) fn verify(&self, watch: &crate::progress::Watch) -> Result<()> {
        match &self.mapped {
            Some(m) => super::read::verify_sections(&m.map, watch),
            None => Ok(()),
        }
    }

    /// Whether some lists are read from a memory map.
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// How many lists are held in memory.
    pub fn held_count(&self) -> usize {
        self.held.iter().flatten().count()
    }

    /// Ids and codes of list `j`.
    pub fn list(&self, j: usize) -> (&[u64], &[u8]) {
        match (&self.held[j], &self.mapped) {
            (Some(l), _) => (&l.ids, &l.codes),
            (None, Some(m)) => m.list(j),
            (None, None) => (&[], &[]),
        }
    }

    /// Refinement rows of list `j` (empty where the index keeps none).
    pub fn refine(&self, j: usize) -> &[u8] {
        match (&self.held[j], &self.mapped) {
            (Some(l), _) => &l.refine,
            (None, Some(m)) => m.refine(j),
            (None, None) => &[],
        }
    }

    /// List `j` held in memory, copied from the map first if it is still read from there, with
    /// room for `more` vectors more of `code` code bytes and `refine` refinement bytes each
    /// (`OutOfMemory` where that does not fit: the list's contents do not change).
    pub fn list_mut(
        &mut self,
        j: usize,
        more: usize,
        code: usize,
        refine: usize,
    ) -> Result<&mut List> {
        let room = |e: std::collections::TryReserveError| {
            Error::OutOfMemory(format!("list {j} cannot grow by {more} vectors: {e}"))
        };
        if self.held[j].is_none() {
            let (ids, codes) = self.list(j);
            let mut l = List::default();
            l.ids
                .try_reserve_exact(ids.len().saturating_add(more))
                .map_err(room)?;
            l.ids.extend_from_slice(ids);
            l.codes
                .try_reserve_exact(codes.len().saturating_add(more.saturating_mul(code)))
                .map_err(room)?;
            l.codes.extend_from_slice(codes);
            let r = self.refine(j);
            l.refine
                .try_reserve_exact(r.len().saturating_add(more.saturating_mul(refine)))
                .map_err(room)?;
            l.refine.extend_from_slice(r);
            self.held[j] = Some(l);
        }
        let l = self.held[j].as_mut().expect("list held just above");
        l.ids.try_reserve(more).map_err(room)?;
        l.codes
            .try_reserve(more.saturating_mul(code))
            .map_err(room)?;
        l.refine
            .try_reserve(more.saturating_mul(refine))
            .map_err(room)?;
        Ok(l)
    }
}

/// Lists read in place from a memory map.
#[derive(Debug)]
pub(crate) struct MappedLists {
    pub(super) map: memmap2::Mmap,
    pub(super) offsets: Vec<u64>,
    pub(super) ids: Range<usize>,
    pub(super) codes: Range<usize>,
    pub(super) code_size: usize,
    pub(super) refine: Range<usize>,
    pub(super) refine_size: usize,
}

impl MappedLists {
    pub fn list(&self, j: usize) -> (&[u64], &[u8]) {
        let (a, b) = (self.offsets[j] as usize, self.offsets[j + 1] as usize);
        // Sections are 64-byte aligned and the map is page aligned, so the cast cannot fail.
        let ids: &[u64] = bytemuck::cast_slice(&self.map[self.ids.clone()]);
        (
            &ids[a..b],
            &self.map[self.codes.start + a * self.code_size..self.codes.start + b * self.code_size],
        )
    }

    pub fn refine(&self, j: usize) -> &[u8] {
        let (a, b) = (self.offsets[j] as usize, self.offsets[j + 1] as usize);
        let (s, r) = (self.refine.start, self.refine_size);
        &self.map[s + a * r..s + b * r]
    }
}
