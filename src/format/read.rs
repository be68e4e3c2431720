//! Deserialization of untrusted bytes: every size, offset and checksum is checked before use;
//! anything wrong is `Error::Corrupt`, never a panic.

use super::*;
use crate::error::{Error, Result};
use crate::params::Refine;
use crate::params::{Metric, Rotation};
use crate::progress::{Phase, Watch};
use crate::quant::{Codebook, ProductQuantizer};
use std::ops::Range;

/// Fuzz builds (`cargo fuzz` sets `cfg(fuzzing)`) skip the checksums, so that mutated bytes
/// reach every other check instead of stopping at the first hash; every other build checks.
const VERIFY_CHECKSUMS: bool = !cfg!(fuzzing);

fn corrupt<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::Corrupt(msg.into()))
}

/// Validated layout of a file: where each section lies.
struct Layout {
    kind: u32,
    sections: Vec<(u32, Range<usize>)>,
}

impl Layout {
    fn get(&self, id: u32) -> Option<Range<usize>> {
        self.sections
            .iter()
            .find(|s| s.0 == id)
            .map(|s| s.1.clone())
    }
    fn need(&self, id: u32, name: &str) -> Result<Range<usize>> {
        self.get(id)
            .map_or_else(|| corrupt(format!("missing {name} section")), Ok)
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Which section checksums `layout` checks: all, or all but the bulk ones (ids, codes,
/// refinement rows), which a deferred load leaves to `verify_sections`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checks {
    All,
    Structure,
}

fn layout(b: &[u8]) -> Result<Layout> {
    layout_with(b, Checks::All, &Watch::none())
}

/// Bytes of a section checksummed between two polls of the watch.
const SUM_PIECE: usize = 8 << 20;

/// The checksum of `bytes` (as `checksum`), taken in pieces with `watch` told of each
/// (`Phase::Verify`, of `total` bytes) and asked whether to go on.
fn watched_checksum(bytes: &[u8], watch: &Watch, total: usize) -> Result<u64> {
    if !watch.listening() && bytes.len() <= SUM_PIECE {
        watch.poll()?;
        return Ok(checksum(bytes));
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for piece in bytes.chunks(SUM_PIECE) {
        h.update(piece);
        watch.advance(Phase::Verify, piece.len(), total)?;
    }
    Ok(h.digest())
}

fn layout_with(b: &[u8], checks: Checks, watch: &Watch) -> Result<Layout> {
    if b.len() < HEADER {
        return corrupt(format!(
            "{} bytes is shorter than the {HEADER}-byte header",
            b.len()
        ));
    }
    if b[..8] != MAGIC {
        return corrupt(format!(
            "not a vlc_compress file: it starts with {:02x?}, expected {:02x?}",
            &b[..8],
            MAGIC
        ));
    }
    if VERIFY_CHECKSUMS && checksum(&b[..56]) != u64_at(b, 56) {
        return corrupt(format!(
            "header checksum {:016x} does not match its contents ({:016x})",
            u64_at(b, 56),
            checksum(&b[..56])
        ));
    }
    let version = u32_at(b, 8);
    if version != VERSION && version != VERSION_PLAIN {
        return Err(Error::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let kind = u32_at(b, 12);
    if kind != Kind::Codebook as u32 && kind != Kind::Index as u32 {
        return corrupt(format!("unknown file kind {kind} (1 codebook, 2 index)"));
    }
    let count = u32_at(b, 16) as usize;
    if count == 0 || count > MAX_SECTIONS {
        return corrupt(format!(
            "section count {count} is not in 1..={MAX_SECTIONS}"
        ));
    }
    if u32_at(b, 20) != 0 || u64_at(b, 48) != 0 {
        return corrupt(format!(
            "reserved header fields are {} and {}, expected 0",
            u32_at(b, 20),
            u64_at(b, 48)
        ));
    }
    if u64_at(b, 24) != b.len() as u64 {
        return corrupt(format!(
            "file is {} bytes, header says {} (truncated?)",
            b.len(),
            u64_at(b, 24)
        ));
    }
    let table = HEADER..HEADER + count * ENTRY;
    if table.end > b.len() {
        return corrupt(format!(
            "the table of {count} sections ends at byte {}, past the file's {} bytes",
            table.end,
            b.len()
        ));
    }
    if VERIFY_CHECKSUMS && checksum(&b[table.clone()]) != u64_at(b, 40) {
        return corrupt(format!(
            "section table checksum {:016x} does not match its contents ({:016x})",
            u64_at(b, 40),
            checksum(&b[table.clone()])
        ));
    }
    // Sections lie in table order, each at the first 64-byte boundary after the one before,
    // with zero padding between them and after the last (the only layout the writer makes):
    // no overlap, no hidden bytes.
    let mut sections = Vec::with_capacity(count);
    let mut pos = table.end;
    for e in b[table.clone()].chunks_exact(ENTRY) {
        let id = u32_at(e, 0);
        let off = u64_at(e, 8);
        let len = u64_at(e, 16);
        if !(sec::META..=sec::LEVELS).contains(&id) {
            return corrupt(format!("unknown section id {id}"));
        }
        if u32_at(e, 4) != 0 {
            return corrupt(format!("section {id}: reserved field is not zero"));
        }
        if off != align_up(pos) as u64 {
            return corrupt(format!(
                "section {id} starts at {off}, expected {} (sections overlap or leave gaps)",
                align_up(pos)
            ));
        }
        let end = off.checked_add(len).filter(|&x| x <= b.len() as u64);
        let Some(end) = end else {
            return corrupt(format!("section {id} runs past the end"));
        };
        if sections
            .last()
            .is_some_and(|s: &(u32, Range<usize>)| s.0 >= id)
        {
            return corrupt(format!(
                "section {id} follows section {} (sections come once each, in id order)",
                sections.last().map_or(0, |s| s.0)
            ));
        }
        zero_padding(b, pos..off as usize)?;
        let r = off as usize..end as usize;
        let bulk = matches!(id, sec::IDS | sec::CODES | sec::REFINE);
        let check = checks == Checks::All || !bulk;
        if VERIFY_CHECKSUMS
            && check
            && watched_checksum(&b[r.clone()], watch, b.len())? != u64_at(e, 24)
        {
            return corrupt(format!("section {id} checksum mismatch"));
        }
        sections.push((id, r));
        pos = end as usize;
    }
    if align_up(pos) != b.len() {
        return corrupt(format!(
            "file is {} bytes, its sections end at {pos} (expected {} with padding)",
            b.len(),
            align_up(pos)
        ));
    }
    // The header, table and padding between the sections: the file is checked to its end.
    watch.report(Phase::Verify, b.len(), b.len())?;
    zero_padding(b, pos..b.len())?;
    if (version == VERSION) != sections.iter().any(|s| s.0 == sec::LEVELS) {
        return corrupt(format!(
            "a version {version} file {} a LEVELS section",
            if version == VERSION {
                "without"
            } else {
                "with"
            }
        ));
    }
    let allowed: &[u32] = if kind == Kind::Codebook as u32 {
        &[sec::META, sec::ANCHORS, sec::ROTATION, sec::PQ, sec::LEVELS]
    } else {
        &[
            sec::META,
            sec::ANCHORS,
            sec::ROTATION,
            sec::PQ,
            sec::LIST_OFFSETS,
            sec::IDS,
            sec::CODES,
            sec::REFINE,
            sec::LEVELS,
        ]
    };
    if let Some(s) = sections.iter().find(|s| !allowed.contains(&s.0)) {
        return corrupt(format!(
            "section {} does not belong in a codebook file",
            s.0
        ));
    }
    let required: &[u32] = if kind == Kind::Codebook as u32 {
        &[sec::META, sec::ANCHORS, sec::PQ]
    } else {
        &[
            sec::META,
            sec::ANCHORS,
            sec::PQ,
            sec::LIST_OFFSETS,
            sec::IDS,
            sec::CODES,
        ]
    };
    if let Some(id) = required
        .iter()
        .find(|&&id| !sections.iter().any(|s| s.0 == id))
    {
        return corrupt(format!("section {id} is missing"));
    }
    Ok(Layout { kind, sections })
}

fn zero_padding(b: &[u8], r: Range<usize>) -> Result<()> {
    if b[r.clone()].iter().any(|&v| v != 0) {
        return corrupt(format!(
            "padding at bytes {}..{} is not zero",
            r.start, r.end
        ));
    }
    Ok(())
}

fn floats(b: &[u8], r: Range<usize>, count: usize, name: &str) -> Result<Vec<f32>> {
    if r.len() != count.saturating_mul(4) {
        return corrupt(format!(
            "{name}: {} bytes, expected {count} floats",
            r.len()
        ));
    }
    Ok(bytemuck::pod_collect_to_vec(&b[r]))
}

struct Meta {
    ntotal: u64,
    refine: Refine,
}

fn codebook(b: &[u8], l: &Layout) -> Result<(Codebook, Meta)> {
    let m = l.need(sec::META, "meta")?;
    if m.len() != META_LEN {
        return corrupt(format!(
            "meta section is {} bytes, expected {META_LEN}",
            m.len()
        ));
    }
    let mb = &b[m];
    let f = |i: usize| u32_at(mb, i * 4) as usize;
    let (d, metric, nlist, nsub, bits, dsub, rotation) =
        (f(0), f(1), f(2), f(3), f(4) as u32, f(5), f(6));
    let refine = Refine::from_code(f(7) as u32)
        .map_or_else(|| corrupt(format!("unknown refinement kind {}", f(7))), Ok)?;
    if (refine != Refine::None) != l.get(sec::REFINE).is_some() {
        return corrupt(format!(
            "refinement rows do not match their kind ({refine})"
        ));
    }
    let ntotal = u64_at(mb, 32);
    let fingerprint = u64_at(mb, 40);
    if l.kind == Kind::Codebook as u32 && (ntotal != 0 || refine != Refine::None) {
        return corrupt(format!(
            "a codebook file says it holds {ntotal} vectors or refinement rows ({refine})"
        ));
    }
    let metric = Metric::from_code(metric as u32)
        .map_or_else(|| corrupt(format!("unknown metric {metric}")), Ok)?;
    let rotation = Rotation::from_code(rotation as u32)
        .map_or_else(|| corrupt(format!("unknown rotation {rotation}")), Ok)?;
    let levelled = l.get(sec::LEVELS).is_some();
    crate::quant::check_shape(d, nlist, nsub, bits, dsub, levelled).map_err(Error::Corrupt)?;
    let dp = nsub * dsub;
    // Each section's size must match the shape before anything is read from it.
    let anchors = floats(
        b,
        l.need(sec::ANCHORS, "anchors")?,
        nlist.saturating_mul(d),
        "anchors",
    )?;
    let rot = match l.get(sec::ROTATION) {
        Some(r) => floats(b, r, dp.saturating_mul(dp), "rotation")?,
        None => Vec::new(),
    };
    let pq_len = nsub.saturating_mul(1 << bits).saturating_mul(dsub);
    let centroids = floats(b, l.need(sec::PQ, "quantizer")?, pq_len, "quantizer")?;
    let levels = match l.get(sec::LEVELS) {
        Some(r) => floats(b, r, 1 << bits, "error levels")?,
        None => Vec::new(),
    };
    let pq = ProductQuantizer {
        nsub,
        bits,
        dsub,
        centroids,
        levels,
    };
    // Bad values in a file whose checksums hold are still a damaged file.
    let cb = Codebook::from_parts(d, metric, anchors, rotation, rot, pq).map_err(|e| match e {
        Error::NonFinite(m) | Error::InvalidArgument(m) => Error::Corrupt(m),
        e => e,
    })?;
    if cb.fingerprint != fingerprint || u64_at(b, 32) != fingerprint {
        return corrupt(format!(
            "codebook fingerprint {fingerprint:016x} (header {:016x}) does not match its \
             contents ({:016x})",
            u64_at(b, 32),
            cb.fingerprint
        ));
    }
    Ok((cb, Meta { ntotal, refine }))
}

/// Where the lists of an index lie inside its bytes; validated once.
struct ListLayout {
    offsets: Vec<u64>,
    ids: Range<usize>,
    codes: Range<usize>,
    code_size: usize,
    refine: Range<usize>,
    refine_size: usize,
}

fn lists(b: &[u8], l: &Layout, cb: &Codebook, meta: &Meta) -> Result<ListLayout> {
    let nl = cb.anchors();
    let off = l.need(sec::LIST_OFFSETS, "list offsets")?;
    if off.len() != (nl + 1) * 8 {
        return corrupt(format!(
            "list offsets section holds {} bytes, expected {} ({nl} lists + 1, 8 bytes each)",
            off.len(),
            (nl + 1) * 8
        ));
    }
    let offsets: Vec<u64> = bytemuck::pod_collect_to_vec(&b[off]);
    if offsets[0] != 0 || offsets.windows(2).any(|w| w[0] > w[1]) || offsets[nl] != meta.ntotal {
        return corrupt(format!(
            "list offsets run from {} to {}, not increasing from 0 to the vector count {}",
            offsets[0], offsets[nl], meta.ntotal
        ));
    }
    let n = usize::try_from(meta.ntotal).map_err(|_| {
        Error::Corrupt(format!(
            "vector count {} exceeds this machine's {}",
            meta.ntotal,
            usize::MAX
        ))
    })?;
    let ids = l.need(sec::IDS, "ids")?;
    let codes = l.need(sec::CODES, "codes")?;
    let cs = cb.residual_code_size();
    if Some(ids.len()) != n.checked_mul(8) || Some(codes.len()) != n.checked_mul(cs) {
        return corrupt(format!(
            "ids and codes sections hold {} and {} bytes; {n} vectors need {} and {}",
            ids.len(),
            codes.len(),
            n.saturating_mul(8),
            n.saturating_mul(cs)
        ));
    }
    // Refinement rows are there exactly when META declares them, one per vector.
    let rs = meta.refine.row_bytes(cb.dim());
    let refine = match (l.get(sec::REFINE), meta.refine) {
        (None, Refine::None) => 0..0,
        (Some(r), k) if k != Refine::None && Some(r.len()) == n.checked_mul(rs) => r,
        _ => {
            return corrupt(format!(
                "refinement rows do not match their kind ({})",
                meta.refine
            ))
        }
    };
    if let Some(i) = b[ids.clone()].chunks_exact(8).position(|v| v == [0xff; 8]) {
        return corrupt(format!(
            "vector {i} has id {} (UINT64_MAX), the no-result marker",
            u64::MAX
        ));
    }
    Ok(ListLayout {
        offsets,
        ids,
        codes,
        code_size: cs,
        refine,
        refine_size: rs,
    })
}

fn kind_check(l: &Layout, want: Kind) -> Result<()> {
    if l.kind != want as u32 {
        return corrupt(format!("file holds kind {}, expected {:?}", l.kind, want));
    }
    Ok(())
}

fn owned_lists(b: &[u8], l: &Layout, cb: &Codebook, meta: &Meta) -> Result<Lists> {
    let ll = lists(b, l, cb, meta)?;
    let ids_all: Vec<u64> = bytemuck::pod_collect_to_vec(&b[ll.ids.clone()]);
    let codes_all = &b[ll.codes.clone()];
    let refine_all = &b[ll.refine.clone()];
    let lists = (0..cb.anchors())
        .map(|j| {
            let (s, e) = (ll.offsets[j] as usize, ll.offsets[j + 1] as usize);
            List {
                ids: ids_all[s..e].to_vec(),
                codes: codes_all[s * ll.code_size..e * ll.code_size].to_vec(),
                refine: refine_all[s * ll.refine_size..e * ll.refine_size].to_vec(),
            }
        })
        .collect();
    Ok(Lists::held(lists))
}

/// Parses a codebook from bytes (a codebook or an index file).
pub fn read_codebook_bytes(b: &[u8]) -> Result<Codebook> {
    let l = layout(b)?;
    Ok(codebook(b, &l)?.0)
}

/// An index file's parts: codebook, lists and the kind of refinement rows they hold.
pub(crate) type IndexParts = (Codebook, Lists, Refine);

/// Parses an index's codebook and lists from bytes (copied into memory).
pub(crate) fn read_index_bytes(b: &[u8]) -> Result<IndexParts> {
    let l = layout(b)?;
    kind_check(&l, Kind::Index)?;
    let (cb, meta) = codebook(b, &l)?;
    let lists = owned_lists(b, &l, &cb, &meta)?;
    Ok((cb, lists, meta.refine))
}

fn open_map(path: &Path) -> Result<memmap2::Mmap> {
    let file = crate::files::open_regular(path)?;
    // SAFETY: the map is read-only. Like every memory-mapped reader, we rely on the file not
    // being truncated or rewritten in place while mapped; the library itself only ever replaces
    // files by rename, which leaves existing maps intact.
    unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| Error::io(format!("mapping {}", path.display()), e))
}

/// Loads a codebook from a codebook or index file.
pub fn load_codebook(path: &Path) -> Result<Codebook> {
    read_codebook_bytes(&open_map(path)?)
}

/// Loads an index's codebook and lists. With `mmap`, ids and codes stay in the file's memory
/// map and are used in place; otherwise they are read in. With `defer` (mapped loads only),
/// the checksums of the ids, codes and refinement rows are left to `verify_sections`: every
/// size and offset, the header, the section table and the codebook are still checked.
/// Its checksums are taken in pieces reported to `watch` (`Phase::Verify`), which may stop
/// the load.
pub(crate) fn load_index(
    path: &Path,
    mmap: bool,
    defer: bool,
    watch: &Watch,
) -> Result<IndexParts> {
    let map = open_map(path)?;
    let checks = if mmap && defer {
        Checks::Structure
    } else {
        Checks::All
    };
    let l = layout_with(&map, checks, watch)?;
    kind_check(&l, Kind::Index)?;
    let (cb, meta) = codebook(&map, &l)?;
    if !mmap {
        let lists = owned_lists(&map, &l, &cb, &meta)?;
        return Ok((cb, lists, meta.refine));
    }
    let ll = lists(&map, &l, &cb, &meta)?;
    if bytemuck::try_cast_slice::<u8, u64>(&map[ll.ids.clone()]).is_err() {
        return corrupt(format!(
            "ids section at byte {} is not 8-byte aligned",
            ll.ids.start
        ));
    }
    let mapped = MappedLists {
        map,
        offsets: ll.offsets,
        ids: ll.ids,
        codes: ll.codes,
        code_size: ll.code_size,
        refine: ll.refine,
        refine_size: ll.refine_size,
    };
    Ok((cb, Lists::mapped(mapped)?, meta.refine))
}

/// Checks every section checksum of a mapped index file (what a deferred load left out),
/// reporting to `watch` as `load_index` does.
pub(crate) fn verify_sections(map: &[u8], watch: &Watch) -> Result<()> {
    layout_with(map, Checks::All, watch).map(|_| ())
}
