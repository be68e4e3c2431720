//! Side rows an index may keep beside its codes, one per vector, chosen when the index is made,
//! saved in its file and memory-mapped on load. Each starts with an error bound (2 bytes: the
//! reconstruction error `|x - x_hat|` as an IEEE half float rounded up, `x_hat` being what the
//! code decodes to, `x` the vector as the index sees it, normalised under cosine), from which
//! searches give every hit a lower and an upper bound of its true distance (`bounds`). Then,
//! for a re-rank that needs nothing from the caller (FAISS's `IndexRefine`), a finer copy of
//! the vector:
//!
//! - `Bound`: none, the bound alone (2 bytes).
//! - `F16`: the vector in IEEE half precision (2 + 2 d bytes).
//! - `Int8`: what its code misses, `r = x - x_hat`, as d signed bytes under one scale
//!   `s = max |r_i| / 127` stored first (f32, little-endian): 2 + 4 + d bytes; each value is
//!   off by at most s / 2.

use crate::error::{Error, Result};

pub use crate::params::Refine;

impl Refine {
    /// The rows of `x` (n x d, prepared for the metric), `approx` being what their codes
    /// decode to (n x d). An f16 row that cannot hold a value is refused.
    pub(crate) fn encode(self, x: &[f32], d: usize, approx: &[f32]) -> Result<Vec<u8>> {
        let rb = self.row_bytes(d);
        let n = x.len() / d.max(1);
        let mut out = crate::error::try_vec(n.saturating_mul(rb), 0u8, "refinement rows")?;
        for (i, row) in x.chunks_exact(d).enumerate() {
            if self == Refine::None {
                continue;
            }
            let anchor = &approx[i * d..(i + 1) * d];
            let (head, o) = out[i * rb..(i + 1) * rb].split_at_mut(2);
            head.copy_from_slice(&bound_up(row, anchor).to_le_bytes());
            match self {
                Refine::None | Refine::Bound => {}
                Refine::F16 => {
                    for (v, b) in row.iter().zip(o.chunks_exact_mut(2)) {
                        let h = half::f16::from_f32(*v);
                        if h.is_infinite() {
                            return Err(Error::InvalidArgument(format!(
                                "row {i} holds {v}, beyond float16: use int8 refinement"
                            )));
                        }
                        b.copy_from_slice(&h.to_le_bytes());
                    }
                }
                Refine::Int8 => {
                    let top = row
                        .iter()
                        .zip(anchor)
                        .fold(0f32, |m, (v, c)| m.max((v - c).abs()));
                    let s = if top > 0.0 { top / 127.0 } else { 1.0 };
                    o[..4].copy_from_slice(&s.to_le_bytes());
                    for ((v, c), b) in row.iter().zip(anchor).zip(&mut o[4..]) {
                        *b = ((v - c) / s).round().clamp(-127.0, 127.0) as i8 as u8;
                    }
                }
            }
        }
        Ok(out)
    }

    /// A row's error bound (`|x - x_hat|` rounded up); +inf for `None`.
    pub(crate) fn bound(self, row: &[u8]) -> f32 {
        match self {
            Refine::None => f32::INFINITY,
            _ => half::f16::from_le_bytes([row[0], row[1]]).to_f32(),
        }
    }

    /// One row's vector back as floats into `out` (d values), `anchor` being what its
    /// vector's code decodes to (read by `Int8` only).
    pub(crate) fn decode(self, row: &[u8], anchor: &[f32], out: &mut [f32]) {
        let row = row.get(2..).unwrap_or(&[]);
        match self {
            Refine::None | Refine::Bound => {}
            Refine::F16 => {
                for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                }
            }
            Refine::Int8 => {
                let s = f32::from_le_bytes([row[0], row[1], row[2], row[3]]);
                for ((o, &b), c) in out.iter_mut().zip(&row[4..]).zip(anchor) {
                    *o = c + s * (b as i8) as f32;
                }
            }
        }
    }
}

/// An index's refinement vectors as the raw vectors of a re-rank, found through its id map
/// (where several vectors share an id, the first added).
pub(crate) struct RefineRows<'a> {
    pub ix: &'a super::Index,
}

impl crate::index::RawVectors for RefineRows<'_> {
    fn dim(&self) -> usize {
        self.ix.cb.dim()
    }
    fn fetch(&self, ids: &[u64], out: &mut [f32]) -> Result<()> {
        let (ix, d) = (self.ix, self.ix.cb.dim());
        let map = ix.id_map()?;
        let (rs, cs) = (ix.refine.row_bytes(d), ix.cb.residual_code_size());
        let mut at = Vec::with_capacity(ids.len());
        for &id in ids {
            let l = map.locations(id).next();
            at.push(l.ok_or_else(|| crate::error::raw_missing(id))?);
        }
        // Int8 rows refine what the codes decode to.
        let approx = match ix.refine {
            Refine::Int8 => {
                let anchors: Vec<u32> = at.iter().map(|l| l.list).collect();
                let mut codes = Vec::with_capacity(ids.len() * cs);
                for l in &at {
                    let r = l.row as usize;
                    codes.extend_from_slice(&ix.list(l.list as usize).1[r * cs..(r + 1) * cs]);
                }
                ix.cb.decode_parts(&anchors, &codes)?
            }
            _ => Vec::new(),
        };
        for (i, (l, o)) in at.iter().zip(out.chunks_exact_mut(d.max(1))).enumerate() {
            let (j, r) = (l.list as usize, l.row as usize);
            let row = &ix.lists.refine(j)[r * rs..(r + 1) * rs];
            ix.refine
                .decode(row, approx.get(i * d..(i + 1) * d).unwrap_or(&[]), o);
        }
        Ok(())
    }
}

/// `|x - x_hat|` as an f16 no smaller than it (computed in f64): a bound that holds.
fn bound_up(x: &[f32], approx: &[f32]) -> half::f16 {
    let e = x
        .iter()
        .zip(approx)
        .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
        .sum::<f64>()
        .sqrt();
    let h = half::f16::from_f64(e);
    if h.to_f64() >= e {
        h
    } else {
        // The next f16 up (e is finite and non-negative; past the largest, +inf).
        half::f16::from_bits(h.to_bits() + 1)
    }
}
