//! Files made by hand, as a hostile or careless writer would: any shape, any bytes, with every
//! checksum correct so that the reader's other checks are what stands in the way
//! (docs/format.md has the layout).

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

pub const CODEBOOK: u32 = 1;
pub const INDEX: u32 = 2;

pub fn align(x: usize) -> usize {
    x.div_ceil(64) * 64
}

fn le32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}
fn le64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

pub fn floats(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}
pub fn words(x: &[u64]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A codebook's shape and values, as META and its sections describe them.
pub struct Shape {
    pub d: u32,
    pub metric: u32,
    pub nlist: u32,
    pub nsub: u32,
    pub bits: u32,
    pub dsub: u32,
    pub rotation: u32,
    pub anchors: Vec<f32>,
    pub rot: Vec<f32>,
    pub centroids: Vec<f32>,
}

impl Shape {
    /// The fingerprint the library computes from these contents.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Xxh3::new();
        for v in [
            self.d,
            self.metric,
            self.rotation,
            self.nsub,
            self.bits,
            self.dsub,
        ] {
            h.update(&(v as u64).to_le_bytes());
        }
        h.update(&floats(&self.anchors));
        h.update(&floats(&self.rot));
        h.update(&floats(&self.centroids));
        h.digest()
    }

    fn meta(&self, ntotal: u64) -> Vec<u8> {
        let mut m = Vec::new();
        for v in [
            self.d,
            self.metric,
            self.nlist,
            self.nsub,
            self.bits,
            self.dsub,
            self.rotation,
            0,
        ] {
            le32(&mut m, v);
        }
        le64(&mut m, ntotal);
        le64(&mut m, self.fingerprint());
        m
    }

    /// A codebook file (no lists) or an index file with empty lists.
    pub fn file(&self, kind: u32) -> Vec<u8> {
        let mut s = vec![(1, self.meta(0)), (2, floats(&self.anchors))];
        if !self.rot.is_empty() {
            s.push((3, floats(&self.rot)));
        }
        s.push((4, floats(&self.centroids)));
        if kind == INDEX {
            s.push((5, words(&vec![0u64; self.nlist as usize + 1])));
            s.push((6, Vec::new()));
            s.push((7, Vec::new()));
        }
        file(kind, self.fingerprint(), &s)
    }
}

/// A file laid out as the writer lays it out: header, table, each section at the next 64-byte
/// boundary, zero padding to a multiple of 64.
pub fn file(kind: u32, fingerprint: u64, sections: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let mut table = Vec::new();
    let mut at = align(64 + 32 * sections.len());
    let mut offs = Vec::new();
    for (id, b) in sections {
        offs.push(at);
        le32(&mut table, *id);
        le32(&mut table, 0);
        le64(&mut table, at as u64);
        le64(&mut table, b.len() as u64);
        le64(&mut table, xxh3_64(b));
        at = align(at + b.len());
    }
    let mut out = vec![0u8; at];
    out[..8].copy_from_slice(b"VLCCMPR\0");
    out[8..12].copy_from_slice(&2u32.to_le_bytes());
    out[12..16].copy_from_slice(&kind.to_le_bytes());
    out[16..20].copy_from_slice(&(sections.len() as u32).to_le_bytes());
    out[24..32].copy_from_slice(&(at as u64).to_le_bytes());
    out[32..40].copy_from_slice(&fingerprint.to_le_bytes());
    out[64..64 + table.len()].copy_from_slice(&table);
    for ((_, b), &o) in sections.iter().zip(&offs) {
        out[o..o + b.len()].copy_from_slice(b);
    }
    reseal(&mut out);
    out
}

/// Recomputes every checksum of `b` (sections as its table places them, clamped to the file,
/// then the table and the header), so that an edit is seen only by the other checks.
pub fn reseal(b: &mut [u8]) {
    let n = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let n = n.min((b.len().saturating_sub(64)) / 32);
    for i in 0..n {
        let e = 64 + 32 * i;
        let off = u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap()) as usize;
        let len = u64::from_le_bytes(b[e + 16..e + 24].try_into().unwrap()) as usize;
        let (s, t) = (off.min(b.len()), off.saturating_add(len).min(b.len()));
        let c = xxh3_64(&b[s..t.max(s)]);
        b[e + 24..e + 32].copy_from_slice(&c.to_le_bytes());
    }
    let tc = xxh3_64(&b[64..64 + 32 * n]);
    b[40..48].copy_from_slice(&tc.to_le_bytes());
    let hc = xxh3_64(&b[..56]);
    b[56..64].copy_from_slice(&hc.to_le_bytes());
}

/// Where section `id` lies in `b` (offset, length), read from its table.
pub fn section(b: &[u8], id: u32) -> (usize, usize) {
    let n = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    (0..n)
        .map(|i| 64 + 32 * i)
        .find(|&e| u32::from_le_bytes(b[e..e + 4].try_into().unwrap()) == id)
        .map(|e| {
            (
                u64::from_le_bytes(b[e + 8..e + 16].try_into().unwrap()) as usize,
                u64::from_le_bytes(b[e + 16..e + 24].try_into().unwrap()) as usize,
            )
        })
        .expect("section present")
}
