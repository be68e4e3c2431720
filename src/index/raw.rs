//! Raw vectors for exact re-ranking: rows the caller holds in memory or fetches by id.

use crate::error::{raw_missing, Result};

/// Raw (uncompressed) vectors for exact re-ranking, looked up by id: rows held in memory
/// (`get`), or fetched in batches from wherever the caller keeps them (`fetch`). A search
/// calls them from several threads at once.
pub trait RawVectors: Sync {
    fn dim(&self) -> usize;
    /// The vector stored under `id`, where it is held in memory.
    fn get(&self, _id: u64) -> Option<&[f32]> {
        None
    }
    /// Writes the vectors of `ids` into `out` (`ids.len()` x `dim()`, in order): one call per
    /// query's candidates. By default `get`'s rows; an id without one is an `InvalidArgument`.
    fn fetch(&self, ids: &[u64], out: &mut [f32]) -> Result<()> {
        for (&id, row) in ids.iter().zip(out.chunks_exact_mut(self.dim().max(1))) {
            row.copy_from_slice(self.get(id).ok_or_else(|| raw_missing(id))?);
        }
        Ok(())
    }
}

/// Raw vectors that a caller's function fetches: `f(ids, out)` writes the rows of `ids` into
/// `out` (`ids.len()` x `d`), or fails, which fails the search with that error. It is called
/// from several threads at once, once per query's candidates.
pub struct FetchRaw<F> {
    pub d: usize,
    pub f: F,
}

impl<F: Fn(&[u64], &mut [f32]) -> Result<()> + Sync> RawVectors for FetchRaw<F> {
    fn dim(&self) -> usize {
        self.d
    }
    fn fetch(&self, ids: &[u64], out: &mut [f32]) -> Result<()> {
        (self.f)(ids, out)
    }
}

/// Raw vectors in a dense row-major array where id = row number.
#[derive(Clone, Copy, Debug)]
pub struct DenseRaw<'a> {
    pub data: &'a [f32],
    pub d: usize,
}

impl RawVectors for DenseRaw<'_> {
    fn dim(&self) -> usize {
        self.d
    }
    fn get(&self, id: u64) -> Option<&[f32]> {
        let i = usize::try_from(id).ok()?;
        self.data
            .get(i.checked_mul(self.d)?..(i + 1).checked_mul(self.d)?)
    }
}
