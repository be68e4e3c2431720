//! Inverted lists as a file holds them: owned in memory, or used in place from a memory map.

use std::ops::Range;

/// An index's lists: per anchor, the ids, the codes (the residual code size each) and the
/// refinement rows (their size each; empty lists of them when the index keeps none) of its
/// vectors.
#[derive(Debug)]
pub(crate) enum Lists {
    Owned {
        ids: Vec<Vec<u64>>,
        codes: Vec<Vec<u8>>,
        refine: Vec<Vec<u8>>,
    },
    Mapped(MappedLists),
}

impl Lists {
    /// Checks the checksums of a mapped file's sections (all of them: a deferred load left the
    /// bulk ones out). Lists held in memory have none to check.
    pub(crate) fn verify(&self) -> crate::error::Result<()> {
        match self {
            Lists::Mapped(m) => super::read::verify_sections(&m.map),
            Lists::Owned { .. } => Ok(()),
        }
    }

    /// `m` empty lists.
    pub fn empty(m: usize) -> crate::Result<Lists> {
        Ok(Lists::Owned {
            ids: crate::error::try_vec(m, Vec::new(), "index lists")?,
            codes: crate::error::try_vec(m, Vec::new(), "index lists")?,
            refine: crate::error::try_vec(m, Vec::new(), "index lists")?,
        })
    }

    /// Ids and codes of list `j`.
    pub fn list(&self, j: usize) -> (&[u64], &[u8]) {
        match self {
            Lists::Owned { ids, codes, .. } => (&ids[j], &codes[j]),
            Lists::Mapped(m) => m.list(j),
        }
    }

    /// Refinement rows of list `j` (empty where the index keeps none).
    pub fn refine(&self, j: usize) -> &[u8] {
        match self {
            Lists::Owned { refine, .. } => &refine[j],
            Lists::Mapped(m) => m.refine(j),
        }
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
