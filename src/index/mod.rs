//! The Index: a Codebook plus inverted lists (ids and residual codes per anchor), on the
//! context whose backend adds and searches. `search(&self)` is safe from many threads at
//! once; `add`/`remove` take `&mut self`.

mod bounds;
mod ids;
pub(crate) mod memory;
mod range;
mod raw;
mod refine;
mod search;

pub use crate::backend::filter::{Filter, Predicate};
pub use bounds::BoundedResults;
pub use range::RangeResults;
pub use refine::Refine;
pub use search::{DenseRaw, FetchRaw, RawVectors, SearchResults};

use crate::backend::host_scan::{fastscan, Packed, Tables, MAX_TERM_BYTES};
use crate::backend::{CodebookView, ListsView};
use crate::context::watching;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::format::{List, Lists};
use crate::progress::{Control, Listener, Phase, Progress, SharedProgress, Watch};
use crate::quant::estimate;
use crate::quant::{Codebook, Vectors};
use ids::IdMap;
use std::sync::{Arc, OnceLock};

/// recall@`at`: the fraction of each query's true top-`at` (`gt`: rows of `gt_cols` ids, nearest
/// first) found among its first `at` returned ids (`ids`: `k` per query), averaged over queries.
pub fn recall_at(ids: &[u64], k: usize, gt: &[i32], gt_cols: usize, at: usize) -> f64 {
    let nq = ids.len() / k;
    let mut hit = 0usize;
    for q in 0..nq {
        let truth = &gt[q * gt_cols..q * gt_cols + at];
        hit += ids[q * k..q * k + at]
            .iter()
            .filter(|&&f| truth.iter().any(|&t| t as u64 == f))
            .count();
    }
    hit as f64 / (nq * at).max(1) as f64
}

/// `u64::MAX` marks a missing result, so no vector may carry it.
fn check_ids(ids: &[u64]) -> Result<()> {
    match ids.iter().position(|&i| i == u64::MAX) {
        Some(i) => Err(Error::InvalidArgument(format!(
            "ids[{i}] is {} (UINT64_MAX), the marker of a missing result; use another id",
            u64::MAX
        ))),
        None => Ok(()),
    }
}

/// Sizes and balance of an index.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct IndexStats {
    pub vectors: usize,
    pub lists: usize,
    pub dim: usize,
    /// Bytes of residual code per vector (its list names its anchor; ids take 8 more).
    pub residual_code_size: usize,
    pub largest_list: usize,
    pub empty_lists: usize,
    /// Largest list over the mean list size.
    pub max_list_over_mean: f64,
    /// Bytes of refinement vector per vector (0 where the index keeps none).
    pub refine_bytes_per_vector: usize,
    /// Bytes of codes, ids and refinement vectors held (the next three summed).
    pub payload_bytes: usize,
    /// Residual codes held.
    pub code_bytes: usize,
    /// Ids held (8 bytes each).
    pub id_bytes: usize,
    /// Refinement vectors held.
    pub refine_bytes: usize,
    /// The id map, once built (by remove, contains, reconstruct, get_codes); else 0.
    pub id_map_bytes: usize,
    /// The search tables derived from the codebook, once built (by the first search); else 0.
    pub table_bytes: usize,
    /// 4-bit codes in fast-scan blocks, once built (by the first search); else 0.
    pub fast_scan_bytes: usize,
    /// Codes, ids and refinement vectors are read from a memory map, not held in memory,
    /// except those of the lists changed since the load (`lists_in_memory`).
    pub memory_mapped: bool,
    /// Lists held in memory: every list, unless memory-mapped; there, those a change touched.
    pub lists_in_memory: usize,
}

/// A searchable compressed index.
#[derive(Debug)]
pub struct Index {
    ctx: Arc<Context>,
    pub(crate) cb: Arc<Codebook>,
    pub(crate) lists: Lists,
    /// The refinement rows the lists keep (`refine`).
    refine: Refine,
    /// Lookup-table terms derived from the codebook (never stored in files), built by the
    /// first search: an index that is only filled costs none of their memory.
    tables: OnceLock<Tables>,
    /// Held while the tables are built, so that concurrent first searches build them once.
    tables_build: std::sync::Mutex<()>,
    /// Unique to this index and its contents: renewed by every change, so a device copy of
    /// the lists knows when it is stale.
    pub(crate) stamp: u64,
    /// 4-bit lists in fast-scan blocks, made at the first search that scans them; adds,
    /// removes and merges change the lists they touch (under a memory cap they drop them).
    packed4: OnceLock<Packed>,
    /// Where each id sits (`ids`), built by the first call that needs it and kept by changes.
    id_map: OnceLock<IdMap>,
    /// The largest error bound held (`bounds`), found when first needed, dropped by changes.
    max_bound: OnceLock<f32>,
    /// Where add and merge report (`set_progress`); never saved.
    progress: Listener,
}

/// Source of index stamps, unique within the process.
static STAMPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_stamp() -> u64 {
    STAMPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Index {
    /// An empty index on a trained codebook, adding and searching on `ctx`. Its search
    /// tables are allocated by the first search (`OutOfMemory` there if they cannot be).
    pub fn new(ctx: Arc<Context>, cb: Arc<Codebook>) -> Result<Index> {
        Index::with_refine(ctx, cb, Refine::None)
    }

    /// As `new`, keeping refinement vectors of kind `refine` beside the codes: a search with
    /// `rerank > 0` and no raw vectors then re-ranks against them (module `refine`).
    pub fn with_refine(ctx: Arc<Context>, cb: Arc<Codebook>, refine: Refine) -> Result<Index> {
        let lists = Lists::empty(cb.anchors())?;
        Index::from_parts(ctx, cb, lists, refine)
    }

    /// The refinement vectors this index keeps.
    pub fn refine(&self) -> Refine {
        self.refine
    }

    /// The re-rank's raw vectors: the caller's where given, else the refinement vectors this
    /// index keeps, if any (`own` holds them for the call).
    pub(crate) fn raw_or_refined<'r>(
        &'r self,
        raw: Option<&'r dyn RawVectors>,
        own: &'r Option<refine::RefineRows<'r>>,
    ) -> Option<&'r dyn RawVectors> {
        raw.or(own.as_ref().map(|r| r as &dyn RawVectors))
    }

    /// This index's refinement vectors as raw vectors, where it keeps some.
    pub(crate) fn refined(&self) -> Option<refine::RefineRows<'_>> {
        self.refine
            .has_vectors()
            .then_some(refine::RefineRows { ix: self })
    }

    /// Loads an index file onto `ctx`. With `mmap`, ids and codes stay in the file's memory
    /// map and are used in place (a change copies into memory only the lists it touches);
    /// otherwise they are read in. Damaged files give `Corrupt`.
    pub fn load(ctx: Arc<Context>, path: impl AsRef<std::path::Path>, mmap: bool) -> Result<Index> {
        Index::load_with(ctx, path, mmap, false, &Control::default())
    }

    /// As `load` (`defer`: as `load_deferred`, which maps the file), watched as `ctl` says:
    /// its progress callback (else the context's) hears `Phase::Verify` (bytes checksummed)
    /// and may cancel; past its deadline (else the context's timeout) the load stops with
    /// `Error::TimedOut`. Nothing is kept of a load that stops.
    pub fn load_with(
        ctx: Arc<Context>,
        path: impl AsRef<std::path::Path>,
        mmap: bool,
        defer: bool,
        ctl: &Control,
    ) -> Result<Index> {
        let mmap = mmap || defer;
        if !mmap {
            // Read in, the lists take about the file's size.
            let len = std::fs::metadata(path.as_ref()).map_or(0, |m| m.len() as usize);
            let shown = path.as_ref().display().to_string();
            ctx.check_cap(len, || format!("reading {shown} into memory"))?;
        }
        let fallback = ctx.progress();
        let parts = watching(&ctx, ctl, fallback.as_ref(), |w| {
            crate::format::load_index(path.as_ref(), mmap, defer, w)
        });
        let (cb, lists, refine) = parts?;
        Index::from_parts(ctx, Arc::new(cb), lists, refine)
    }

    /// As `load` with `mmap`, without reading the ids, codes and refinement rows for their
    /// checksums: the load touches only the header, section table, codebook and list offsets
    /// (all checked), and the pages of the bulk sections are read when searches need them.
    /// `verify` checks the rest; until then a damaged bulk section goes unnoticed (its values
    /// are still bounds-checked where used: never a crash).
    pub fn load_deferred(ctx: Arc<Context>, path: impl AsRef<std::path::Path>) -> Result<Index> {
        Index::load_with(ctx, path, true, true, &Control::default())
    }

    /// Checks every checksum of a memory-mapped index's file (`Corrupt` on a mismatch). An
    /// index held in memory has nothing to check: `Ok`.
    pub fn verify(&self) -> Result<()> {
        self.verify_with(&Control::default())
    }

    /// As `verify`, watched as `ctl` says (as `load_with`; the index's progress callback
    /// comes before the context's).
    pub fn verify_with(&self, ctl: &Control) -> Result<()> {
        self.watched(ctl, |w| self.lists.verify(w))
    }

    /// Parses an index from the bytes of its file (`to_bytes`), onto `ctx`.
    pub fn from_bytes(ctx: Arc<Context>, bytes: &[u8]) -> Result<Index> {
        // The lists take about the bytes' size.
        let len = bytes.len();
        ctx.check_cap(len, || format!("reading an index of {len} bytes"))?;
        let (cb, lists, refine) = crate::format::read_index_bytes(bytes)?;
        Index::from_parts(ctx, Arc::new(cb), lists, refine)
    }

    /// Saves codebook and lists to `path` (atomically: a crash leaves the old file or the new).
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        crate::format::save_index(&self.cb, &self.lists, self.refine, path.as_ref())
    }

    /// The bytes of this index's file.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::format::index_bytes(&self.cb, &self.lists, self.refine)
    }

    /// As [`Index::to_bytes`], the buffer counted against the context's memory cap and
    /// allocated fallibly: `OutOfMemory` where it does not fit.
    pub fn try_to_bytes(&self) -> Result<Vec<u8>> {
        crate::format::try_index_bytes(&self.cb, &self.lists, self.refine, |len| {
            self.ctx
                .check_cap(len, || format!("serializing an index of {len} bytes"))
        })
    }

    /// A copy of this index on another context (another backend or device, say); the
    /// lists are copied into memory.
    pub fn to_context(&self, ctx: Arc<Context>) -> Result<Index> {
        Index::from_parts(ctx, self.cb.clone(), self.owned_copy(), self.refine)
    }

    /// The lists, copied into memory.
    fn owned_copy(&self) -> Lists {
        Lists::held(
            (0..self.nlist())
                .map(|j| List {
                    ids: self.list(j).0.to_vec(),
                    codes: self.list(j).1.to_vec(),
                    refine: self.lists.refine(j).to_vec(),
                })
                .collect(),
        )
    }

    fn from_parts(
        ctx: Arc<Context>,
        cb: Arc<Codebook>,
        lists: Lists,
        refine: Refine,
    ) -> Result<Index> {
        Ok(Index {
            ctx,
            cb,
            lists,
            refine,
            tables: OnceLock::new(),
            tables_build: Default::default(),
            stamp: next_stamp(),
            packed4: OnceLock::new(),
            id_map: OnceLock::new(),
            max_bound: OnceLock::new(),
            progress: Listener::default(),
        })
    }

    pub fn codebook(&self) -> &Arc<Codebook> {
        &self.cb
    }

    /// Reports of this index's long calls (add, merge) go to `progress`, which may cancel
    /// them; `None` leaves them to the context's (`Context::set_progress`). A cancelled call
    /// returns `Error::Cancelled` and leaves the index as it was.
    pub fn set_progress(&mut self, progress: Option<SharedProgress>) {
        self.progress = Listener(progress);
    }

    /// The context this index adds and searches on.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Number of lists (anchors).
    pub fn nlist(&self) -> usize {
        self.cb.anchors()
    }

    /// Ids and codes of list `j`.
    pub(crate) fn list(&self, j: usize) -> (&[u64], &[u8]) {
        self.lists.list(j)
    }

    /// Every list's 4-bit codes in fast-scan blocks, made once by the first search that needs
    /// them; under a memory cap, only where `fit_search` found them room (else `None`: the
    /// lists are scanned code by code, with the same results). On one thread: searches call
    /// this from rayon tasks, and a parallel build there could pick up another search task on
    /// the building thread, which would wait on itself.
    pub(crate) fn packed4(&self) -> Option<&Packed> {
        if self.packed4.get().is_none() && self.ctx.memory_cap() > 0 {
            return None;
        }
        Some(self.build_packed4())
    }

    fn build_packed4(&self) -> &Packed {
        self.packed4
            .get_or_init(|| Packed::new(self.nlist(), self.cb.pq.code_fields(), |j| self.list(j).1))
    }

    /// Whether this index's searches scan fast-scan blocks (4-bit codes within their reach).
    pub(crate) fn scans_blocks(&self) -> bool {
        fastscan::takes(&self.cb.view())
    }

    /// Runs `f` with this index's codebook and lists as devices read them.
    pub(crate) fn with_views<R>(&self, f: impl FnOnce(&CodebookView, &ListsView) -> R) -> R {
        let list = |j: usize| self.list(j);
        let mut light = None;
        let lists = ListsView {
            key: self.stamp,
            nlist: self.nlist(),
            len: self.len(),
            list: &list,
            // Without the tables (no memory for them), devices build terms per list.
            l2_terms: self
                .tables(&mut light)
                .ok()
                .and_then(|t| t.l2_terms.as_deref()),
        };
        f(&self.cb.view(), &lists)
    }

    /// The search tables, built on first use. While another thread builds them, this call
    /// makes light ones in `light` instead (no per-list terms: each probed list's are made as
    /// needed) rather than wait: the build runs rayon tasks, and a thread waiting inside one
    /// may be the very thread whose stolen task the build needs, so waiting could hang.
    pub(crate) fn tables<'a>(&'a self, light: &'a mut Option<Tables>) -> Result<&'a Tables> {
        if let Some(t) = self.tables.get() {
            return Ok(t);
        }
        // Under a memory cap only `fit_search` builds them, where they fit.
        if self.ctx.memory_cap() > 0 {
            return Ok(light.insert(Tables::new(&self.cb.view(), 0)?));
        }
        match self.build_tables()? {
            Some(t) => Ok(t),
            None => Ok(light.insert(Tables::new(&self.cb.view(), 0)?)),
        }
    }

    /// Builds the search tables unless built; `None` while another thread builds them.
    fn build_tables(&self) -> Result<Option<&Tables>> {
        if let Some(t) = self.tables.get() {
            return Ok(Some(t));
        }
        // One builder: concurrent first searches would each make a copy (up to hundreds of
        // MB). A failed build is not kept, so a later search may try again.
        let _one = match self.tables_build.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
        };
        if let Some(t) = self.tables.get() {
            return Ok(Some(t));
        }
        let t = Tables::new(&self.cb.view(), MAX_TERM_BYTES)?;
        Ok(Some(self.tables.get_or_init(|| t)))
    }

    /// Number of vectors held.
    pub fn len(&self) -> usize {
        (0..self.nlist()).map(|j| self.list(j).0.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn stats(&self) -> IndexStats {
        let sizes: Vec<usize> = (0..self.nlist()).map(|j| self.list(j).0.len()).collect();
        let n: usize = sizes.iter().sum();
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let mean = n as f64 / sizes.len().max(1) as f64;
        IndexStats {
            vectors: n,
            lists: sizes.len(),
            dim: self.cb.dim(),
            residual_code_size: self.cb.residual_code_size(),
            largest_list: largest,
            empty_lists: sizes.iter().filter(|&&s| s == 0).count(),
            max_list_over_mean: if mean > 0.0 {
                largest as f64 / mean
            } else {
                0.0
            },
            refine_bytes_per_vector: self.refine.row_bytes(self.cb.dim()),
            payload_bytes: n
                * (self.cb.residual_code_size() + 8 + self.refine.row_bytes(self.cb.dim())),
            code_bytes: n * self.cb.residual_code_size(),
            id_bytes: n * 8,
            refine_bytes: n * self.refine.row_bytes(self.cb.dim()),
            id_map_bytes: self.id_map.get().map_or(0, IdMap::heap_bytes),
            table_bytes: self.tables.get().map_or(0, Tables::heap_bytes),
            fast_scan_bytes: self.packed4.get().map_or(0, Packed::heap_bytes),
            memory_mapped: self.lists.is_mapped(),
            lists_in_memory: self.lists.held_count(),
        }
    }

    /// Every change starts here: it renews the stamp and drops what was derived from the old
    /// contents, and hands out the lists with the id map, where one was built.
    fn changing(&mut self) -> (&mut Lists, Option<&mut IdMap>, Option<&mut Packed>) {
        self.stamp = next_stamp();
        // The blocks follow the change where they were made, except under a memory cap: there
        // only `fit_search` makes them, where it finds them room.
        if self.ctx.memory_cap() > 0 {
            self.packed4 = OnceLock::new();
        }
        self.max_bound = OnceLock::new();
        let packed = self.packed4.get_mut();
        (&mut self.lists, self.id_map.get_mut(), packed)
    }

    /// Bytes of code and of refinement row per vector.
    fn row_sizes(&self) -> (usize, usize) {
        let d = self.cb.dim();
        (self.cb.residual_code_size(), self.refine.row_bytes(d))
    }

    /// The id map, built now if no call has needed it yet (`OutOfMemory` where it does not fit).
    fn id_map(&self) -> Result<&IdMap> {
        if let Some(m) = self.id_map.get() {
            return Ok(m);
        }
        let need = IdMap::bytes_for(self.len());
        self.ctx
            .check_cap(need, || format!("an id map of {} ids", self.len()))?;
        let map = IdMap::build(self.nlist(), |j| self.list(j).0)?;
        Ok(self.id_map.get_or_init(|| map))
    }

    /// Encodes `x` (n x d, f32 or f16) on the context's backend and appends it with the
    /// caller's `ids` (one per vector). Ids need not be unique; `remove` drops every vector
    /// with a given id. On error nothing is added.
    pub fn add<'a>(&mut self, x: impl Into<Vectors<'a>>, ids: &[u64]) -> Result<()> {
        let p = self.progress.or_context(&self.ctx);
        let ctx = self.ctx.clone();
        watching(&ctx, &Control::default(), p.as_ref(), |w| {
            self.add_watched(x.into(), ids, w)
        })
    }

    /// As `add`, reporting rows encoded to `progress` for this call.
    pub fn add_with_progress<'a>(
        &mut self,
        x: impl Into<Vectors<'a>>,
        ids: &[u64],
        progress: &dyn Progress,
    ) -> Result<()> {
        let ctx = self.ctx.clone();
        watching(&ctx, &Control::progress(progress), None, |w| {
            self.add_watched(x.into(), ids, w)
        })
    }

    fn add_watched(&mut self, x: Vectors<'_>, ids: &[u64], watch: &Watch) -> Result<()> {
        let d = self.cb.dim();
        if x.len() != ids.len() * d {
            return Err(Error::InvalidArgument(format!(
                "{} values for {} ids of dimension {d} (expected {})",
                x.len(),
                ids.len(),
                ids.len() * d
            )));
        }
        check_ids(ids)?;
        self.fit_add(ids.len(), matches!(x, Vectors::F16(_)))?;
        let cb = &self.cb;
        let (anchor, codes) = self.ctx.run(|b| cb.encode_parts_watched(b, x, watch))?;
        let refine = match self.refine {
            Refine::None => Vec::new(),
            r => {
                let x = crate::quant::prepare(x.rows_f32(0, ids.len(), d), d, cb.metric());
                // Every kind keeps the error bound, which needs what the codes decode to.
                let approx = cb.decode_parts(&anchor, &codes)?;
                r.encode(&x, d, &approx)?
            }
        };
        // The last chance to cancel: from here on the index changes.
        watch.check()?;
        self.append(&anchor, &codes, &refine, ids)
    }

    /// As `add`, for `ids.len()` vectors in CUDA device memory at address `at`, read in place
    /// (`Codebook::encode_parts_device`; contexts whose backend reads device memory only,
    /// else `BackendUnavailable`).
    ///
    /// # Safety
    /// Nothing writes the vectors at `at` while the call runs.
    pub unsafe fn add_device(&mut self, at: u64, ids: &[u64]) -> Result<()> {
        crate::backend::need_device_memory(self.ctx.backend(), "adding from device memory")?;
        check_ids(ids)?;
        if self.refine != Refine::None {
            return Err(Error::InvalidArgument(format!(
                "this index keeps {} refinement vectors, made from host memory: add with add",
                self.refine
            )));
        }
        self.fit_add(ids.len(), false)?;
        let cb = &self.cb;
        let (ctx, n) = (&self.ctx, ids.len());
        let p = self.progress.or_context(ctx);
        // SAFETY: as the caller vouches.
        let (anchor, codes) = watching(ctx, &Control::default(), p.as_ref(), |w| {
            ctx.run(|b| unsafe { cb.encode_parts_device_watched(b, at, n, w) })
        })?;
        self.append(&anchor, &codes, &[], ids)
    }

    /// `OutOfMemory` where adding `n` vectors (from f16 where `f16`) needs more than the
    /// context's cap: checked before anything is allocated.
    fn fit_add(&self, n: usize, f16: bool) -> Result<()> {
        self.ctx
            .check_caps(self.add_memory(n, f16), || format!("adding {n} vectors"))
    }

    /// Appends encoded vectors (each one's anchor, code and refinement row) to their lists
    /// under `ids`.
    fn append(&mut self, anchor: &[u32], codes: &[u8], refine: &[u8], ids: &[u64]) -> Result<()> {
        let (cs, rs) = self.row_sizes();
        let mut grown = vec![0usize; self.nlist()];
        for &a in anchor {
            grown[a as usize] += 1;
        }
        let (lists, mut map, mut packed) = self.changing();
        // Every list that grows is held in memory with its room (its blocks' too), every
        // insert into the map has its room and every row its 32 bits, before anything changes.
        for (j, &g) in grown.iter().enumerate().filter(|(_, &g)| g > 0) {
            let len = lists.list_mut(j, g, cs, rs)?.ids.len();
            if map.is_some() {
                IdMap::loc(j, len + g - 1)?;
            }
            if let Some(p) = packed.as_deref_mut() {
                p.reserve(j, len, g)?;
            }
        }
        if let Some(map) = map.as_deref_mut() {
            map.reserve(ids.len())?;
        }
        for (i, (&a, &id)) in anchor.iter().zip(ids).enumerate() {
            let l = lists.list_mut(a as usize, 0, cs, rs)?;
            if let Some(map) = map.as_deref_mut() {
                let row = l.ids.len() as u32;
                map.insert(id, ids::Loc { list: a, row });
            }
            let code = &codes[i * cs..(i + 1) * cs];
            if let Some(p) = packed.as_deref_mut() {
                p.push(a as usize, l.ids.len(), code);
            }
            l.ids.push(id);
            l.codes.extend_from_slice(code);
            l.refine.extend_from_slice(&refine[i * rs..(i + 1) * rs]);
        }
        Ok(())
    }

    /// Removes every vector whose id is in `ids`; returns how many were removed. Each goes
    /// through the id map (built by the first removal): the last row of its list takes its
    /// place, so no list is scanned and list order is not kept.
    pub fn remove(&mut self, ids: &[u64]) -> Result<usize> {
        self.id_map()?;
        let (cs, rs) = self.row_sizes();
        let (lists, map, mut packed) = self.changing();
        let Some(map) = map else {
            return Err(Error::InvalidState("the id map went missing".into()));
        };
        // The lists that lose vectors are held in memory before anything changes.
        for &id in ids {
            for at in map.locations(id) {
                lists.list_mut(at.list as usize, 0, cs, rs)?;
            }
        }
        let mut removed = 0;
        for &id in ids {
            while let Some(at) = map.take(id) {
                let (j, row) = (at.list as usize, at.row as usize);
                let l = lists.list_mut(j, 0, cs, rs)?;
                let last = l.ids.len() - 1;
                if let Some(p) = packed.as_deref_mut() {
                    p.swap_remove(j, row, last, &l.codes[last * cs..(last + 1) * cs]);
                }
                if row != last {
                    l.ids[row] = l.ids[last];
                    l.codes.copy_within(last * cs..(last + 1) * cs, row * cs);
                    l.refine.copy_within(last * rs..(last + 1) * rs, row * rs);
                    map.moved(
                        l.ids[row],
                        ids::Loc {
                            list: at.list,
                            row: last as u32,
                        },
                        at,
                    );
                }
                l.ids.pop();
                l.codes.truncate(last * cs);
                l.refine.truncate(last * rs);
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Appends every vector of `other`, which must share this index's codebook.
    pub fn merge_from(&mut self, other: &Index) -> Result<()> {
        let p = self.progress.or_context(&self.ctx);
        let ctx = self.ctx.clone();
        watching(&ctx, &Control::default(), p.as_ref(), |w| {
            self.merge_watched(other, w)
        })
    }

    /// As `merge_from`, reporting lists copied to `progress` for this call.
    pub fn merge_from_with_progress(
        &mut self,
        other: &Index,
        progress: &dyn Progress,
    ) -> Result<()> {
        let ctx = self.ctx.clone();
        watching(&ctx, &Control::progress(progress), None, |w| {
            self.merge_watched(other, w)
        })
    }

    fn merge_watched(&mut self, other: &Index, watch: &Watch) -> Result<()> {
        if other.cb.fingerprint() != self.cb.fingerprint() {
            return Err(Error::CodebookMismatch(format!(
                "fingerprints {:016x} and {:016x} differ",
                self.cb.fingerprint(),
                other.cb.fingerprint()
            )));
        }
        if other.refine != self.refine {
            return Err(Error::InvalidArgument(format!(
                "refinement vectors differ: {} here, {} in the other index",
                self.refine, other.refine
            )));
        }
        let m = self.nlist();
        let (cs, rs) = self.row_sizes();
        // Their lists are copied, then appended: twice their payload.
        let need = other.len().saturating_mul(8 + cs + rs).saturating_mul(2);
        let n = other.len();
        self.ctx
            .check_cap(need, || format!("merging {n} vectors"))?;
        // Their lists are copied first, with reports (and chances to cancel) along the way;
        // this index changes only after the last report.
        let mut theirs = Vec::with_capacity(m);
        for j in 0..m {
            watch.report(Phase::Merge, j, m)?;
            let (ids, codes) = other.list(j);
            let refine = other.lists.refine(j);
            theirs.push(List {
                ids: ids.to_vec(),
                codes: codes.to_vec(),
                refine: refine.to_vec(),
            });
        }
        watch.report(Phase::Merge, m, m)?;
        let (lists, map, mut packed) = self.changing();
        let grows = || theirs.iter().enumerate().filter(|(_, t)| !t.ids.is_empty());
        for (j, t) in grows() {
            let len = lists.list_mut(j, t.ids.len(), cs, rs)?.ids.len();
            if map.is_some() {
                IdMap::loc(j, len + t.ids.len() - 1)?;
            }
            if let Some(p) = packed.as_deref_mut() {
                p.reserve(j, len, t.ids.len())?;
            }
        }
        if let Some(map) = map {
            map.reserve(other.len())?;
            for (j, t) in grows() {
                let start = lists.list(j).0.len();
                for (r, &id) in t.ids.iter().enumerate() {
                    map.insert(
                        id,
                        ids::Loc {
                            list: j as u32,
                            row: (start + r) as u32,
                        },
                    );
                }
            }
        }
        for (j, t) in theirs
            .into_iter()
            .enumerate()
            .filter(|(_, t)| !t.ids.is_empty())
        {
            let l = lists.list_mut(j, 0, cs, rs)?;
            if let Some(p) = packed.as_deref_mut() {
                for (r, code) in t.codes.chunks_exact(cs).enumerate() {
                    p.push(j, l.ids.len() + r, code);
                }
            }
            l.ids.extend(t.ids);
            l.codes.extend(t.codes);
            l.refine.extend(t.refine);
        }
        Ok(())
    }

    /// Whether a vector with id `id` is held.
    pub fn contains(&self, id: u64) -> Result<bool> {
        Ok(self.id_map()?.contains(id))
    }

    /// The list and code of each of `ids`, in order; where several vectors share an id, the
    /// first added. An id not held is an `InvalidArgument` naming it.
    fn find(&self, ids: &[u64]) -> Result<(Vec<u32>, Vec<u8>)> {
        self.fit_decode(ids.len())?;
        let map = self.id_map()?;
        let cs = self.cb.residual_code_size();
        let mut anchors = crate::error::try_vec(ids.len(), 0u32, "anchors of the ids")?;
        let n = ids.len().saturating_mul(cs);
        let mut codes = crate::error::try_vec(n, 0u8, "codes of the ids")?;
        for ((&id, a), out) in ids
            .iter()
            .zip(anchors.iter_mut())
            .zip(codes.chunks_exact_mut(cs.max(1)))
        {
            let at = map
                .locations(id)
                .next()
                .ok_or_else(|| Error::InvalidArgument(format!("id {id} is not in the index")))?;
            let row = at.row as usize;
            *a = at.list;
            out.copy_from_slice(&self.list(at.list as usize).1[row * cs..(row + 1) * cs]);
        }
        Ok((anchors, codes))
    }

    /// `OutOfMemory` where decoding `n` of this index's vectors (with their ids) passes the
    /// context's cap. The id map, built once, is not counted.
    fn fit_decode(&self, n: usize) -> Result<()> {
        let gathered = n * (8 + 4 + self.cb.residual_code_size());
        let need = estimate::decode_bytes(&self.cb.shape(), n, gathered);
        self.ctx.check_cap(need, || format!("decoding {n} vectors"))
    }

    /// Approximate vectors (n x d) of `ids`, decoded from their codes, in order; where several
    /// vectors share an id, the first added. An id not held is an `InvalidArgument`.
    pub fn reconstruct(&self, ids: &[u64]) -> Result<Vec<f32>> {
        let (anchors, codes) = self.find(ids)?;
        self.cb.decode_parts(&anchors, &codes)
    }

    /// The codes of `ids` in codec form (`Codebook::codec_size` bytes each: anchor id, then
    /// the residual code; `Codebook::decode` reads them), in order, as `reconstruct` picks them.
    pub fn get_codes(&self, ids: &[u64]) -> Result<Vec<u8>> {
        let (anchors, codes) = self.find(ids)?;
        Ok(self.cb.records(&anchors, &codes))
    }

    /// Approximate vectors of every stored vector with its id, list by list.
    pub fn reconstruct_all(&self) -> Result<(Vec<u64>, Vec<f32>)> {
        let n = self.len();
        self.fit_decode(n)?;
        let mut ids = Vec::with_capacity(n);
        let mut anchors = Vec::with_capacity(n);
        let mut codes = Vec::with_capacity(n * self.cb.residual_code_size());
        for j in 0..self.nlist() {
            let (i, c) = self.list(j);
            ids.extend_from_slice(i);
            anchors.extend(std::iter::repeat_n(j as u32, i.len()));
            codes.extend_from_slice(c);
        }
        Ok((ids, self.cb.decode_parts(&anchors, &codes)?))
    }
}
