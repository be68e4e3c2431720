//! Allow-filters for search: which ids may be returned. They are applied during the scan, to
//! every vector that would enter a query's candidates, so a query gets k hits whenever its
//! probed lists hold k allowed vectors.

use crate::error::{try_vec, Error, Result};
use std::sync::Arc;

/// A copy of `x` allocated fallibly (the caller's sizes can be anything).
fn copied<T: Copy>(x: &[T], what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(x.len())
        .map_err(|_| Error::OutOfMemory(format!("{what}: {} bytes", std::mem::size_of_val(x))))?;
    v.extend_from_slice(x);
    Ok(v)
}

/// A predicate over ids: `Ok(true)` allows, `Ok(false)` skips, an error stops the search
/// with that error. Called from several threads at once.
pub type Predicate = dyn Fn(u64) -> Result<bool> + Send + Sync;

/// Which ids a search may return.
#[derive(Clone)]
pub enum Filter {
    /// Ids in `[0, n_bits)` whose bit is set: bit `i % 8` (least significant first) of byte
    /// `i / 8`. Ids at or beyond `n_bits` are not allowed.
    Bitset { bits: Arc<Vec<u8>>, n_bits: u64 },
    /// The allowed ids, sorted ascending (duplicates allowed).
    Ids(Arc<Vec<u64>>),
    /// A caller's predicate.
    Predicate(Arc<Predicate>),
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Filter::Bitset { n_bits, .. } => write!(f, "Filter::Bitset({n_bits} bits)"),
            Filter::Ids(ids) => write!(f, "Filter::Ids({} ids)", ids.len()),
            Filter::Predicate(_) => f.write_str("Filter::Predicate"),
        }
    }
}

impl Filter {
    /// A bitset filter over `[0, n_bits)`; `bits` must hold at least `ceil(n_bits / 8)` bytes.
    /// The copy is allocated fallibly: `OutOfMemory` where it cannot be.
    pub fn bitset(bits: &[u8], n_bits: u64) -> Result<Filter> {
        let need = n_bits.div_ceil(8);
        if (bits.len() as u64) < need {
            return Err(Error::InvalidArgument(format!(
                "a filter of {n_bits} bits needs {need} bytes, {} given",
                bits.len()
            )));
        }
        Ok(Filter::Bitset {
            bits: Arc::new(copied(&bits[..need as usize], "a bitset filter")?),
            n_bits,
        })
    }

    /// Bytes this filter holds (its copy of the caller's bitset or ids).
    pub fn heap_bytes(&self) -> usize {
        match self {
            Filter::Bitset { bits, .. } => bits.len(),
            Filter::Ids(ids) => ids.len() * 8,
            Filter::Predicate(_) => 0,
        }
    }

    /// A filter allowing exactly `ids`, which must be sorted ascending. Held as a bitset
    /// where that takes no more memory than the list (one bit test per candidate instead of a
    /// binary search).
    pub fn ids(ids: &[u64]) -> Result<Filter> {
        if let Some(i) = ids.windows(2).position(|w| w[0] > w[1]) {
            return Err(Error::InvalidArgument(format!(
                "filter ids must be sorted ascending: ids[{}] = {} > ids[{}] = {}",
                i,
                ids[i],
                i + 1,
                ids[i + 1]
            )));
        }
        match ids.last() {
            Some(&top) if top / 64 < ids.len() as u64 => {
                let n_bits = top + 1;
                let mut bits = try_vec(n_bits.div_ceil(8) as usize, 0u8, "an id filter")?;
                for &i in ids {
                    bits[(i / 8) as usize] |= 1 << (i % 8);
                }
                Ok(Filter::Bitset {
                    bits: Arc::new(bits),
                    n_bits,
                })
            }
            _ => Ok(Filter::Ids(Arc::new(copied(ids, "an id filter")?))),
        }
    }

    /// A filter asking `f` about each id.
    pub fn predicate(f: impl Fn(u64) -> Result<bool> + Send + Sync + 'static) -> Filter {
        Filter::Predicate(Arc::new(f))
    }

    /// Whether a device can apply this filter: bitsets and id lists, turned into a mask of
    /// positions; a predicate is the caller's code and runs on the host.
    pub(crate) fn on_device(&self) -> bool {
        !matches!(self, Filter::Predicate(_))
    }

    /// The devices' form: over `ids` (every vector's id, in the order the lists lie back to
    /// back), bit `i % 32` of word `i / 32` set where vector i is allowed; at least one word.
    pub(crate) fn positions(&self, ids: &[u64]) -> Result<Vec<u32>> {
        use rayon::prelude::*;
        let mut words = try_vec(ids.len().div_ceil(32).max(1), 0u32, "filter mask")?;
        words
            .par_iter_mut()
            .zip(ids.par_chunks(32))
            .try_for_each(|(w, c)| {
                for (b, &id) in c.iter().enumerate() {
                    *w |= (self.allows(id)? as u32) << b;
                }
                Ok(())
            })?;
        Ok(words)
    }

    /// Whether `id` may be returned.
    #[inline]
    pub fn allows(&self, id: u64) -> Result<bool> {
        Ok(match self {
            Filter::Bitset { bits, n_bits } => {
                id < *n_bits && bits[(id / 8) as usize] >> (id % 8) & 1 == 1
            }
            Filter::Ids(ids) => ids.binary_search(&id).is_ok(),
            Filter::Predicate(f) => f(id)?,
        })
    }
}
