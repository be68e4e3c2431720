//! The scans of one probed list: each code's distance summed from the list's lookup table
//! (8-bit codes one by one, 4-bit codes in fast-scan blocks), offered to a bounded heap.

use super::fastscan;
use super::keep::Keep;
use crate::backend::filter::Filter;
use crate::error::Result;

/// One probed list as the scans read it: its coarse distance (added to every code's sum),
/// ids and codes.
pub(crate) struct List<'a> {
    pub base: f32,
    pub ids: &'a [u64],
    pub codes: &'a [u8],
}

/// Offers a scored vector to the heap, asking the filter only about those that would enter.
#[inline(always)]
fn offer(top: &mut impl Keep, d: f32, id: u64, filter: Option<&Filter>) -> Result<()> {
    if d <= top.bound() && filter.map_or(Ok(true), |f| f.allows(id))? {
        top.keep(d, id);
    }
    Ok(())
}

/// `scan` for 4-bit codes through their blocks (`packed`): the byte sums skip every vector
/// whose bound cannot beat the worst kept, the rest are scored as `scan` scores them.
pub(crate) fn scan4_blocks(
    list: &List,
    lut: &[f32],
    nsub: usize,
    packed: &[u8],
    table: &mut fastscan::ByteTable,
    filter: Option<&Filter>,
    top: &mut impl Keep,
) -> Result<()> {
    let (base, ids) = (list.base, list.ids);
    table.fill(lut);
    // The float sums start from `base`: their rounding grows with it too.
    let floor = base + table.offset - table.slack - 4e-5 * base.abs();
    let step = 1.0 / table.scale;
    let bb = table.bytes.len();
    fastscan::each_block(packed, &table.bytes, |b, sums| {
        let v0 = b * fastscan::BLOCK;
        // The bound only tightens while the block is scored: the lanes within it now are a
        // superset of those that pass below.
        let mut lanes = fastscan::within(sums, ids.len() - v0, floor, step, top.bound());
        // The ids of those lanes are read only if they get in, from memory the scan has not
        // touched: asked for now, they arrive while the codes are scored.
        let mut ahead = lanes;
        while ahead != 0 {
            let t = ahead.trailing_zeros() as usize;
            prefetch(&ids[v0 + t]);
            ahead &= !(0xFF << (t & !7));
        }
        // Least byte sum first: the likeliest to get in tighten the bound soonest, and the
        // rest of the block is then passed over by the test below. The kept set is the same
        // in any order (ties go by id).
        let mut order = [(0u16, 0u8); fastscan::BLOCK];
        let mut n = 0;
        while lanes != 0 {
            let t = lanes.trailing_zeros() as usize;
            lanes &= lanes - 1;
            order[n] = (sums[t], t as u8);
            n += 1;
        }
        let order = &mut order[..n];
        order.sort_unstable();
        for &(_, t) in order.iter() {
            let t = t as usize;
            if floor + sums[t] as f32 * step > top.bound() {
                break;
            }
            // The block is in cache where the list's codes and ids are not: its codes are
            // scored there, and an id is read only for a vector that gets in.
            let code = |j: usize| fastscan::code_at(&packed[b * bb..(b + 1) * bb], t, j);
            let d = score4(base, lut, nsub, code);
            if d <= top.bound() {
                offer(top, d, ids[v0 + t], filter)?;
            }
        }
        Ok(())
    })
}

/// Asks the CPU to bring `x`'s cache line in, without waiting for it.
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no effect but on caches; SSE is in every x86-64 CPU.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(x as *const T as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// One 4-bit code's distance (`code(j)`: its sub-code j), with `scan`'s float operations in
/// `scan`'s order (its pair table holds `lo + hi` per byte, summed by `sum_bytes`).
#[inline(always)]
fn score4(base: f32, lut: &[f32], nsub: usize, code: impl Fn(usize) -> u8) -> f32 {
    sum_bytes(base, nsub.div_ceil(2), |b| {
        let lo = lut[2 * b * 16 + code(2 * b) as usize];
        let hi = if 2 * b + 1 < nsub {
            lut[(2 * b + 1) * 16 + code(2 * b + 1) as usize]
        } else {
            0.0
        };
        lo + hi
    })
}

/// `base` plus the terms of a 4-bit code's bytes (`term(b)`, b < `nbytes`): byte b goes to
/// partial sum b % 4, the sums meet as `(s0 + s1) + (s2 + s3)`, then `base` is added. Four
/// short chains of additions instead of one long one: a vector that passes the byte sums is
/// scored in a quarter of the latency. Every 4-bit score on the host is summed so.
#[inline(always)]
fn sum_bytes(base: f32, nbytes: usize, term: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; 4];
    let whole = nbytes / 4 * 4;
    for b in (0..whole).step_by(4) {
        for (i, a) in acc.iter_mut().enumerate() {
            *a += term(b + i);
        }
    }
    for b in whole..nbytes {
        acc[b % 4] += term(b);
    }
    base + ((acc[0] + acc[1]) + (acc[2] + acc[3]))
}

/// Sums table entries over each code of one list and offers the totals to the heap.
#[inline(always)]
pub(crate) fn scan(
    list: &List,
    lut: &[f32],
    bits: u32,
    nsub: usize,
    pair: &mut Vec<[f32; 256]>,
    filter: Option<&Filter>,
    top: &mut impl Keep,
) -> Result<()> {
    let (base, ids, codes) = (list.base, list.ids, list.codes);
    if bits == 8 {
        // Sub-tables side by side (no pointer to load per byte), indexed by a byte: no
        // bounds check.
        let (tabs, _) = lut.as_chunks::<256>();
        for (code, &id) in codes.chunks_exact(nsub).zip(ids) {
            let mut s = base;
            for (t, &c) in tabs.iter().zip(code) {
                s += t[c as usize];
            }
            offer(top, s, id, filter)?;
        }
    } else {
        // Two 16-entry tables folded into one 256-entry table per byte: one lookup per byte.
        let nbytes = nsub.div_ceil(2);
        pair.resize(nbytes, [0f32; 256]);
        for (b, t) in pair.iter_mut().enumerate() {
            let lo = &lut[2 * b * 16..2 * b * 16 + 16];
            let hi: &[f32] = if 2 * b + 1 < nsub {
                &lut[(2 * b + 1) * 16..(2 * b + 2) * 16]
            } else {
                &[0f32; 16]
            };
            for (v, slot) in t.iter_mut().enumerate() {
                *slot = lo[v & 15] + hi[v >> 4];
            }
        }
        for (code, &id) in codes.chunks_exact(nbytes).zip(ids) {
            let s = sum_bytes(base, nbytes, |b| pair[b][code[b] as usize]);
            offer(top, s, id, filter)?;
        }
    }
    Ok(())
}
