//! Copies into staging memory that a device reads next (page-locked upload buffers). Plain
//! stores read each destination line before writing it, and the device then reads it again:
//! streaming stores skip that first read, which leaves more of the host's memory bandwidth to
//! the device's copy running beside them.

use rayon::prelude::*;

/// Floats per task: large enough to stream, small enough to spread over every thread.
const PIECE: usize = 1 << 16;

/// Copies `src` into `dst` (as long) on every thread and says whether every value was finite:
/// the check rides on the copy's one pass over memory.
pub(crate) fn stage(dst: &mut [f32], src: &[f32]) -> bool {
    assert_eq!(dst.len(), src.len());
    dst.par_chunks_mut(PIECE)
        .zip(src.par_chunks(PIECE))
        .map(|(d, s)| copy_piece(d, s))
        .reduce(|| true, |a, b| a & b)
}

/// NaN or infinite: every exponent bit set.
#[inline]
fn non_finite(v: f32) -> bool {
    v.to_bits() & 0x7f80_0000 == 0x7f80_0000
}

fn copy_tail(d: &mut [f32], s: &[f32]) -> bool {
    let mut bad = false;
    for (o, &v) in d.iter_mut().zip(s) {
        *o = v;
        bad |= non_finite(v);
    }
    !bad
}

#[cfg(target_arch = "x86_64")]
fn copy_piece(d: &mut [f32], s: &[f32]) -> bool {
    use std::arch::x86_64::*;
    // Floats before the first 16-byte boundary of the destination.
    let head = d.as_ptr().align_offset(16).min(d.len());
    let mut ok = copy_tail(&mut d[..head], &s[..head]);
    let (d, s) = (&mut d[head..], &s[head..]);
    let body = d.len() / 16 * 16;
    // SAFETY: SSE2 is part of x86_64; every load is within `s[..body]`, every store within
    // `d[..body]` at a 16-byte aligned address (d starts aligned and steps by 4 floats).
    unsafe {
        let exp = _mm_set1_epi32(0x7f80_0000);
        let mut acc = _mm_setzero_si128();
        let (dp, sp) = (d.as_mut_ptr(), s.as_ptr());
        for i in (0..body).step_by(16) {
            for q in 0..4 {
                let v = _mm_loadu_ps(sp.add(i + 4 * q));
                let e = _mm_and_si128(_mm_castps_si128(v), exp);
                acc = _mm_or_si128(acc, _mm_cmpeq_epi32(e, exp));
                _mm_stream_ps(dp.add(i + 4 * q), v);
            }
        }
        // Streaming stores are weakly ordered: fence them before the device is told to read.
        _mm_sfence();
        ok &= _mm_movemask_epi8(acc) == 0;
    }
    ok & copy_tail(&mut d[body..], &s[body..])
}

#[cfg(not(target_arch = "x86_64"))]
fn copy_piece(d: &mut [f32], s: &[f32]) -> bool {
    copy_tail(d, s)
}

#[cfg(test)]
mod tests {
    use super::stage;

    #[test]
    fn copies_exactly_and_finds_every_bad_value() {
        // Odd lengths and offsets: unaligned heads, bodies and tails.
        let src: Vec<f32> = (0..200_003).map(|i| i as f32 * 0.5 - 7.0).collect();
        for off in [0, 1, 3] {
            let mut dst = vec![0f32; src.len() - off];
            assert!(stage(&mut dst[..], &src[off..]));
            assert_eq!(dst[..], src[off..]);
            for (at, bad) in [(0, f32::NAN), (5, f32::INFINITY), (77_777, -f32::INFINITY)] {
                let mut s = src[off..].to_vec();
                s[at] = bad;
                assert!(!stage(&mut dst[..], &s));
                let mut t = src[off..].to_vec();
                let last = t.len() - 1;
                t[last] = bad;
                assert!(!stage(&mut dst[..], &t));
            }
        }
    }
}
