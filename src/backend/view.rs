//! What devices are given: plain slices and numbers with a key naming their contents, never
//! the library's own objects (the way a BLAS takes a pointer and a leading dimension, not a
//! matrix type). A device keeps a copy of a view while its key is unchanged.

use crate::fallbacks::Fallbacks;
use crate::params::Metric;

/// A trained codebook as devices read it.
#[derive(Clone, Copy, Debug)]
pub struct CodebookView<'a> {
    /// Unique to these contents (the codebook's fingerprint).
    pub key: u64,
    /// Input dimension.
    pub d: usize,
    pub metric: Metric,
    /// m x d anchors.
    pub anchors: &'a [f32],
    /// dp x dp rotation applied to padded residuals (`y = R r`); empty for none.
    pub rotation: &'a [f32],
    /// Sub-quantizers (M) and the columns of each (`dp` = M x dsub).
    pub nsub: usize,
    pub dsub: usize,
    /// Bits per sub-code: 8 or 4.
    pub bits: u32,
    /// M x 2^bits x dsub codewords.
    pub books: &'a [f32],
    /// Empty, or the squared errors (ascending) a code's sub-code after its M others names:
    /// encoders write there the level nearest to the row's squared error summed over its
    /// sub-spaces (`host::error_level`), and L2 scans add the level named.
    pub levels: &'a [f32],
}

impl CodebookView<'_> {
    /// Number of anchors.
    pub fn m(&self) -> usize {
        self.anchors.len() / self.d.max(1)
    }
    /// Padded dimension M x dsub.
    pub fn dp(&self) -> usize {
        self.nsub * self.dsub
    }
    /// Codewords per sub-space.
    pub fn ksub(&self) -> usize {
        1 << self.bits
    }
    /// Bytes an encoder writes per row: one per sub-code (unpacked), the error level's
    /// included.
    pub fn row_bytes(&self) -> usize {
        self.nsub + usize::from(!self.levels.is_empty())
    }
    /// Bytes of one code as the lists hold it: those fields packed at `bits` each (two to a
    /// byte, low nibble first, at 4 bits).
    pub fn code_bytes(&self) -> usize {
        (self.row_bytes() * self.bits as usize).div_ceil(8)
    }
}

/// The inverted lists of an index as devices read them.
#[derive(Clone, Copy)]
pub struct ListsView<'a> {
    /// Unique to these contents: renewed by every change to the lists.
    pub key: u64,
    /// Number of lists (the codebook's anchors).
    pub nlist: usize,
    /// Vectors held over all lists.
    pub len: usize,
    /// List j's ids and codes (`len x CodebookView::code_bytes` bytes).
    pub list: &'a (dyn Fn(usize) -> (&'a [u64], &'a [u8]) + Sync),
    /// Under L2, per list, sub-space and codeword: `|c|^2 + 2 <(R a)_j, c>`, the part of a
    /// distance that does not depend on the query (nlist x M x ksub); None where the host
    /// did not keep them (then the lists are scanned on the host).
    pub l2_terms: Option<&'a [f32]>,
}

impl std::fmt::Debug for ListsView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListsView")
            .field("key", &self.key)
            .field("nlist", &self.nlist)
            .field("len", &self.len)
            .finish()
    }
}

impl ListsView<'_> {
    /// Every list's ids back to back, in `flatten`'s order.
    pub fn flatten_ids(&self) -> Vec<u64> {
        let mut ids = Vec::with_capacity(self.len);
        for j in 0..self.nlist {
            ids.extend_from_slice((self.list)(j).0);
        }
        ids
    }

    /// Every list back to back, as devices hold them: list start offsets (nlist + 1), ids
    /// and codes in list order.
    pub fn flatten(&self) -> (Vec<u64>, Vec<u64>, Vec<u8>) {
        let mut start = Vec::with_capacity(self.nlist + 1);
        let (mut ids, mut codes) = (Vec::with_capacity(self.len), Vec::new());
        start.push(0u64);
        for j in 0..self.nlist {
            let (i, c) = (self.list)(j);
            ids.extend_from_slice(i);
            codes.extend_from_slice(c);
            start.push(ids.len() as u64);
        }
        (start, ids, codes)
    }
}

/// What a device can take, asked before work is handed to it: callers never test which
/// backend they hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Calls may come from many pool threads at once (the host); device backends hold their
    /// device through a call and want one call at a time.
    pub concurrent_calls: bool,
    /// Reads vectors in place from device memory (`encode_device`, `rerank_device`).
    pub device_pointers: bool,
    /// Scans inverted lists on the device (`search_lists`).
    pub list_search: bool,
    /// Range-scans them there too (`range_lists`).
    pub range_search: bool,
    /// Most candidates per query a device scan keeps.
    pub max_candidates: usize,
    /// Code widths (bits per sub-code) a device scan reads.
    pub scan_bits: &'static [u32],
    /// Most entries (sub-quantizers x codewords, f32 each) a device scan's table holds.
    pub max_scan_table: usize,
    /// Keeps fp16 halves beside the rows it assigns (WGPU's cooperative matrices): the
    /// device memory estimates count them.
    pub fp16_rows: bool,
}

impl Caps {
    /// The host: every call, from every thread, nothing on a device.
    pub const HOST: Caps = Caps {
        concurrent_calls: true,
        device_pointers: false,
        list_search: false,
        range_search: false,
        max_candidates: 0,
        scan_bits: &[],
        max_scan_table: 0,
        fp16_rows: false,
    };

    /// Whether a device scan takes these lists under this codebook with `want` candidates
    /// per query: the widths and sizes above, the L2 terms under L2, and vector offsets
    /// within 32 bits. A code's error level takes a row of the table.
    pub fn scans(&self, cb: &CodebookView, lists: &ListsView, want: usize) -> bool {
        self.list_search && self.declines(cb, lists, want).is_empty()
    }

    /// Why a device scan with these caps does not take these lists (`NONE` where it does;
    /// also on the host, which has no device scan to fall back from).
    pub fn declines(&self, cb: &CodebookView, lists: &ListsView, want: usize) -> Fallbacks {
        let checks = [
            (self.scan_bits.contains(&cb.bits), Fallbacks::CODE_WIDTH),
            (
                cb.row_bytes() * cb.ksub() <= self.max_scan_table,
                Fallbacks::SCAN_TABLE_TOO_LARGE,
            ),
            (want <= self.max_candidates, Fallbacks::TOO_MANY_CANDIDATES),
            (
                cb.metric != Metric::L2 || lists.l2_terms.is_some(),
                Fallbacks::LIST_TERMS_TOO_LARGE,
            ),
            (lists.len < u32::MAX as usize, Fallbacks::TOO_MANY_VECTORS),
        ];
        if !self.list_search {
            return Fallbacks::NONE;
        }
        checks
            .iter()
            .filter(|(ok, _)| !ok)
            .fold(Fallbacks::NONE, |a, (_, f)| a | *f)
    }
}

/// How many of its nearest lists each query probes: at least one, at most the lists there
/// are. Made once per search (`Probes::of`, where the request was checked), so that what a
/// device sizes and launches from it never needs a clamp of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probes(usize);

impl Probes {
    /// `nprobe` lists of `nlist`: the one clamp of a search's `nprobe`.
    pub fn of(nprobe: usize, nlist: usize) -> Probes {
        Probes(nprobe.min(nlist).max(1))
    }

    pub fn get(self) -> usize {
        self.0
    }
}
