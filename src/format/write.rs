//! Serialization. Checksums are computed in a first pass over the data, then the file is
//! written front to back in one stream.

use super::*;
use crate::params::Refine;
use crate::quant::Codebook;
use std::io::Write;

/// One section's payload, possibly made of many pieces (the lists of an index).
struct Section<'a> {
    id: u32,
    parts: Vec<&'a [u8]>,
}

impl Section<'_> {
    fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }
    fn checksum(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        for p in &self.parts {
            h.update(p);
        }
        h.digest()
    }
}

fn meta(cb: &Codebook, ntotal: u64, refine: Refine) -> Vec<u8> {
    let mut m = Vec::with_capacity(META_LEN);
    for v in [
        cb.d as u32,
        cb.metric.code(),
        cb.anchors() as u32,
        cb.pq.nsub as u32,
        cb.pq.bits,
        cb.pq.dsub as u32,
        cb.rotation.code(),
        refine.code(),
    ] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.extend_from_slice(&ntotal.to_le_bytes());
    m.extend_from_slice(&cb.fingerprint.to_le_bytes());
    m
}

fn codebook_sections<'a>(cb: &'a Codebook, meta: &'a [u8]) -> Vec<Section<'a>> {
    let mut s = vec![
        Section {
            id: sec::META,
            parts: vec![meta],
        },
        Section {
            id: sec::ANCHORS,
            parts: vec![bytemuck::cast_slice(&cb.anchors)],
        },
    ];
    if !cb.rot.is_empty() {
        s.push(Section {
            id: sec::ROTATION,
            parts: vec![bytemuck::cast_slice(&cb.rot)],
        });
    }
    s.push(Section {
        id: sec::PQ,
        parts: vec![bytemuck::cast_slice(&cb.pq.centroids)],
    });
    s
}

/// The error levels' section, last (sections go in id order), where the codes keep them.
fn levels_section(cb: &Codebook) -> Option<Section<'_>> {
    (!cb.pq.levels.is_empty()).then(|| Section {
        id: sec::LEVELS,
        parts: vec![bytemuck::cast_slice(&cb.pq.levels)],
    })
}

fn emit(
    w: &mut impl Write,
    kind: Kind,
    fingerprint: u64,
    sections: &[Section],
) -> std::io::Result<()> {
    let table_end = HEADER + sections.len() * ENTRY;
    let mut table = Vec::with_capacity(sections.len() * ENTRY);
    let mut at = align_up(table_end);
    let mut offsets = Vec::new();
    for s in sections {
        offsets.push(at);
        table.extend_from_slice(&s.id.to_le_bytes());
        table.extend_from_slice(&0u32.to_le_bytes());
        table.extend_from_slice(&(at as u64).to_le_bytes());
        table.extend_from_slice(&(s.len() as u64).to_le_bytes());
        table.extend_from_slice(&s.checksum().to_le_bytes());
        at = align_up(at + s.len());
    }
    let file_len = at;
    let mut h = Vec::with_capacity(HEADER);
    h.extend_from_slice(&MAGIC);
    let levels = sections.iter().any(|s| s.id == sec::LEVELS);
    let version = if levels { VERSION } else { VERSION_PLAIN };
    h.extend_from_slice(&version.to_le_bytes());
    h.extend_from_slice(&(kind as u32).to_le_bytes());
    h.extend_from_slice(&(sections.len() as u32).to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&(file_len as u64).to_le_bytes());
    h.extend_from_slice(&fingerprint.to_le_bytes());
    h.extend_from_slice(&checksum(&table).to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    let hc = checksum(&h);
    h.extend_from_slice(&hc.to_le_bytes());
    w.write_all(&h)?;
    w.write_all(&table)?;
    let mut pos = table_end;
    let zeros = [0u8; ALIGN];
    for (s, &off) in sections.iter().zip(&offsets) {
        w.write_all(&zeros[..off - pos])?;
        for p in &s.parts {
            w.write_all(p)?;
        }
        pos = off + s.len();
    }
    w.write_all(&zeros[..file_len - pos])
}

/// An index's lists and the refinement rows its META declares.
type IndexLists<'a> = Option<(&'a Lists, Refine)>;

fn with_sections<R>(ix: IndexLists, cb: &Codebook, f: impl FnOnce(Kind, &[Section]) -> R) -> R {
    match ix {
        None => {
            let m = meta(cb, 0, Refine::None);
            let mut s = codebook_sections(cb, &m);
            s.extend(levels_section(cb));
            f(Kind::Codebook, &s)
        }
        Some((ix, refine)) => {
            let nl = cb.anchors();
            let mut offsets = Vec::with_capacity(nl + 1);
            offsets.push(0u64);
            for j in 0..nl {
                offsets.push(offsets[j] + ix.list(j).0.len() as u64);
            }
            let m = meta(cb, offsets[nl], refine);
            let mut s = codebook_sections(cb, &m);
            s.push(Section {
                id: sec::LIST_OFFSETS,
                parts: vec![bytemuck::cast_slice(&offsets)],
            });
            s.push(Section {
                id: sec::IDS,
                parts: (0..nl)
                    .map(|j| bytemuck::cast_slice(ix.list(j).0))
                    .collect(),
            });
            s.push(Section {
                id: sec::CODES,
                parts: (0..nl).map(|j| ix.list(j).1).collect(),
            });
            if refine != Refine::None {
                s.push(Section {
                    id: sec::REFINE,
                    parts: (0..nl).map(|j| ix.refine(j)).collect(),
                });
            }
            s.extend(levels_section(cb));
            f(Kind::Index, &s)
        }
    }
}

fn save(path: &Path, ix: IndexLists, cb: &Codebook) -> crate::error::Result<()> {
    write_atomically(path, |file| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        with_sections(ix, cb, |kind, s| emit(&mut w, kind, cb.fingerprint, s))?;
        w.flush()
    })
}

fn to_bytes(ix: IndexLists, cb: &Codebook) -> Vec<u8> {
    let mut out = Vec::new();
    with_sections(ix, cb, |kind, s| emit(&mut out, kind, cb.fingerprint, s))
        .expect("writing to memory cannot fail");
    out
}

/// Counts the bytes written to it.
struct Counted(usize);

impl Write for Counted {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An index serialized into a buffer allocated fallibly to its exact length, which `check`
/// may refuse first (a memory cap): written once, never grown.
pub(crate) fn try_index_bytes(
    cb: &Codebook,
    lists: &Lists,
    refine: Refine,
    check: impl FnOnce(usize) -> crate::error::Result<()>,
) -> crate::error::Result<Vec<u8>> {
    with_sections(Some((lists, refine)), cb, |kind, s| {
        let mut n = Counted(0);
        emit(&mut n, kind, cb.fingerprint, s).expect("counting cannot fail");
        check(n.0)?;
        let mut out = Vec::new();
        out.try_reserve_exact(n.0).map_err(|_| {
            crate::error::Error::OutOfMemory(format!("serializing an index of {} bytes", n.0))
        })?;
        emit(&mut out, kind, cb.fingerprint, s).expect("writing to memory cannot fail");
        Ok(out)
    })
}

/// Saves a codebook alone (atomically).
pub fn save_codebook(cb: &Codebook, path: &Path) -> crate::error::Result<()> {
    save(path, None, cb)
}

/// Saves an index: codebook and lists (atomically).
pub(crate) fn save_index(
    cb: &Codebook,
    lists: &Lists,
    refine: Refine,
    path: &Path,
) -> crate::error::Result<()> {
    save(path, Some((lists, refine)), cb)
}

/// A codebook serialized to memory (same bytes as its file).
pub fn codebook_bytes(cb: &Codebook) -> Vec<u8> {
    to_bytes(None, cb)
}

/// An index serialized to memory (same bytes as its file).
pub(crate) fn index_bytes(cb: &Codebook, lists: &Lists, refine: Refine) -> Vec<u8> {
    to_bytes(Some((lists, refine)), cb)
}
