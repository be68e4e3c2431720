//! The 4-bit fast scan: a list's codes regrouped in blocks of 32 vectors so that one SIMD
//! shuffle looks up 32 sub-codes in a 16-entry table of bytes, the sums kept in u16 lanes.
//!
//! The byte sums are a filter, never the answer: each table entry is rounded to a byte under
//! one scale, so a vector's byte sum bounds its float distance from below within a known
//! slack; only vectors whose bound can still beat the worst kept candidate are scored in f32,
//! exactly as the plain scan scores them. The results are the plain scan's, bit for bit.
//!
//! Block layout (`pack`): for each sub-quantizer j (their count rounded up to even, the extra
//! one all zeros), 16 bytes; byte t holds the code of vector t in its low nibble and that of
//! vector t + 16 in its high nibble.

use crate::backend::layout::get_code;

/// Vectors per block.
pub(crate) const BLOCK: usize = 32;

/// The most sub-quantizers the u16 sums hold without overflow (255 per sub-code).
pub(crate) const MAX_NSUB: usize = 256;

/// Whether searches of codes under `cb` scan fast-scan blocks: 4-bit codes within the byte
/// sums' reach.
pub(crate) fn takes(cb: &crate::backend::CodebookView) -> bool {
    cb.bits == 4 && cb.row_bytes() <= MAX_NSUB
}

/// Sub-quantizers as blocks hold them: rounded up to even.
fn padded(nsub: usize) -> usize {
    nsub + (nsub & 1)
}

/// Bytes per block.
pub(crate) fn block_bytes(nsub: usize) -> usize {
    padded(nsub) * 16
}

/// A list's 4-bit codes (`nbytes = ceil(nsub / 2)` bytes per vector, as the index holds them)
/// in blocks; the last block's missing vectors have code 0.
#[cfg(test)]
pub(crate) fn pack(codes: &[u8], nsub: usize) -> Vec<u8> {
    let mut out = vec![0u8; packed_len(codes.len() / nsub.div_ceil(2).max(1), nsub)];
    pack_into(codes, nsub, &mut out);
    out
}

/// Bytes of `n` vectors' codes in blocks.
fn packed_len(n: usize, nsub: usize) -> usize {
    n.div_ceil(BLOCK) * block_bytes(nsub)
}

/// `pack` into `out` (`packed_len` bytes, zeroed).
fn pack_into(codes: &[u8], nsub: usize, out: &mut [u8]) {
    let nbytes = nsub.div_ceil(2);
    let bb = block_bytes(nsub);
    for (v, code) in codes.chunks_exact(nbytes).enumerate() {
        let (blk, t) = (v / BLOCK, v % BLOCK);
        let base = blk * bb + t % 16;
        let shift = if t < 16 { 0 } else { 4 };
        for j in 0..nsub {
            out[base + j * 16] |= get_code(code, j, 4) << shift;
        }
    }
}

/// Sub-code `j` of vector `t` of a block.
#[inline(always)]
pub(crate) fn code_at(block: &[u8], t: usize, j: usize) -> u8 {
    let byte = block[j * 16 + t % 16];
    if t < 16 {
        byte & 15
    } else {
        byte >> 4
    }
}

/// Every list's codes in blocks, each list in its own allocation so that a change to the
/// index changes only the lists it touches: a vector added goes into its list's last block
/// (a new block where that one is full), a vector removed takes the last one's place.
#[derive(Debug)]
pub(crate) struct Packed {
    nsub: usize,
    lists: Vec<Vec<u8>>,
}

/// What the allocator keeps beside each list's allocation, for `heap_bytes`.
pub(crate) const LIST_OVERHEAD: usize = std::mem::size_of::<Vec<u8>>() + 16;

impl Packed {
    /// The lists' codes, list j's from `codes(j)`.
    pub(crate) fn new<'a>(nlist: usize, nsub: usize, codes: impl Fn(usize) -> &'a [u8]) -> Self {
        let nbytes = nsub.div_ceil(2).max(1);
        let lists = (0..nlist)
            .map(|j| {
                let c = codes(j);
                let mut out = vec![0u8; packed_len(c.len() / nbytes, nsub)];
                pack_into(c, nsub, &mut out);
                out
            })
            .collect();
        Packed { nsub, lists }
    }

    /// List j's blocks.
    pub(crate) fn list(&self, j: usize) -> &[u8] {
        &self.lists[j]
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let held: usize = self.lists.iter().map(Vec::capacity).sum();
        held + self.lists.len() * LIST_OVERHEAD
    }

    /// Room for list j's next `n` vectors after its first `len`, taken fallibly.
    pub(crate) fn reserve(&mut self, j: usize, len: usize, n: usize) -> crate::error::Result<()> {
        let more = packed_len(len + n, self.nsub) - packed_len(len, self.nsub);
        self.lists[j].try_reserve_exact(more).map_err(|_| {
            crate::error::Error::OutOfMemory(format!("fast-scan blocks: {more} bytes"))
        })
    }

    /// Writes `code` as vector `row` of list j, the list's vectors after it being unset: a new
    /// block where `row` starts one.
    pub(crate) fn push(&mut self, j: usize, row: usize, code: &[u8]) {
        let bb = block_bytes(self.nsub);
        let l = &mut self.lists[j];
        if row.is_multiple_of(BLOCK) {
            l.resize(l.len() + bb, 0);
        }
        set_slot(
            &mut l[(row / BLOCK) * bb..],
            row % BLOCK,
            self.nsub,
            Some(code),
        );
    }

    /// Vector `last` of list j (its last) takes the place of vector `row`, as the lists' own
    /// removal does; the last slot is cleared, and its block dropped once empty.
    pub(crate) fn swap_remove(&mut self, j: usize, row: usize, last: usize, code_of_last: &[u8]) {
        let bb = block_bytes(self.nsub);
        let l = &mut self.lists[j];
        if row != last {
            set_slot(
                &mut l[(row / BLOCK) * bb..],
                row % BLOCK,
                self.nsub,
                Some(code_of_last),
            );
        }
        set_slot(&mut l[(last / BLOCK) * bb..], last % BLOCK, self.nsub, None);
        if last.is_multiple_of(BLOCK) {
            l.truncate(l.len() - bb);
        }
    }
}

/// Slot `t` of a block: `code`'s sub-codes, or zeros.
fn set_slot(block: &mut [u8], t: usize, nsub: usize, code: Option<&[u8]>) {
    let (base, shift) = (t % 16, if t < 16 { 0 } else { 4 });
    for j in 0..nsub {
        let v = code.map_or(0, |c| get_code(c, j, 4));
        let b = &mut block[base + j * 16];
        *b = (*b & !(0xF << shift)) | (v << shift);
    }
}

/// A float table (`nsub` x 16, one list's for one query) as bytes: entry v of sub-quantizer j
/// is `round((lut[j][v] - min_j) * scale)`, one scale for all, so that a byte sum s means
/// about `offset + s / scale`.
pub(crate) struct ByteTable {
    /// `padded(nsub)` x 16 bytes (the padding sub-quantizer all zeros).
    pub bytes: Vec<u8>,
    /// Sum over sub-quantizers of their smallest entry.
    pub offset: f32,
    pub scale: f32,
    /// How far `offset + s / scale` may exceed the float sum a vector gets: half a step per
    /// sub-quantizer for the rounding, and a margin for the float sums' own rounding.
    pub slack: f32,
    /// Each sub-quantizer's smallest entry, from the first pass for the second.
    mins: Vec<f32>,
}

impl ByteTable {
    pub fn new(nsub: usize) -> ByteTable {
        ByteTable {
            bytes: vec![0u8; padded(nsub) * 16],
            offset: 0.0,
            scale: 1.0,
            slack: 0.0,
            mins: vec![0.0; nsub],
        }
    }

    /// Fills the table from `lut` (nsub x 16 floats): called per probed list, so nothing
    /// here allocates. AVX2 where the CPU has it; both kernels give the same bytes.
    pub fn fill(&mut self, lut: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 checked.
            return unsafe { self.fill_avx2(lut) };
        }
        self.fill_scalar(lut)
    }

    /// The reference `fill`.
    pub(crate) fn fill_scalar(&mut self, lut: &[f32]) {
        for (t, m) in lut.chunks_exact(16).zip(self.mins.iter_mut()) {
            *m = t.iter().fold(f32::INFINITY, |a, &v| a.min(v));
        }
        let mut his = [0f32; MAX_NSUB];
        for (t, h) in lut.chunks_exact(16).zip(his.iter_mut()) {
            *h = t.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        }
        let scale = self.scales(&his[..lut.len() / 16]);
        let rows = lut.chunks_exact(16).zip(&self.mins);
        for ((t, &lo), out) in rows.zip(self.bytes.chunks_exact_mut(16)) {
            for (v, o) in t.iter().zip(out) {
                // Half a step up, then truncated: rounding without a libm call (`as`
                // saturates to 0..=255).
                *o = ((v - lo) * scale + 0.5) as u8;
            }
        }
    }

    /// `fill_scalar` with AVX2: the same float operations, eight entries at a time.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_avx2(&mut self, lut: &[f32]) {
        use std::arch::x86_64::*;
        let nsub = lut.len() / 16;
        let mut his = [0f32; MAX_NSUB];
        for ((t, m), h) in lut
            .chunks_exact(16)
            .zip(self.mins.iter_mut())
            .zip(his.iter_mut())
        {
            // SAFETY: `t` is 16 floats; unaligned loads.
            let (a, b) = unsafe {
                (
                    _mm256_loadu_ps(t.as_ptr()),
                    _mm256_loadu_ps(t.as_ptr().add(8)),
                )
            };
            let (lo, hi) = (_mm256_min_ps(a, b), _mm256_max_ps(a, b));
            let lo = _mm_min_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
            let hi = _mm_max_ps(_mm256_castps256_ps128(hi), _mm256_extractf128_ps(hi, 1));
            let lo = _mm_min_ps(lo, _mm_movehl_ps(lo, lo));
            let hi = _mm_max_ps(hi, _mm_movehl_ps(hi, hi));
            *m = _mm_cvtss_f32(_mm_min_ss(lo, _mm_shuffle_ps(lo, lo, 1)));
            *h = _mm_cvtss_f32(_mm_max_ss(hi, _mm_shuffle_ps(hi, hi, 1)));
        }
        let scale = self.scales(&his[..nsub]);
        let (sc, half, top) = (
            _mm256_set1_ps(scale),
            _mm256_set1_ps(0.5),
            _mm256_set1_ps(255.0),
        );
        let rows = lut.chunks_exact(16).zip(&self.mins);
        for ((t, &lo), out) in rows.zip(self.bytes.chunks_exact_mut(16)) {
            let l = _mm256_set1_ps(lo);
            // (v - lo) * scale + 0.5, at most 255 (the widest row's may be far above it),
            // truncated: `as u8`, which saturates.
            let q = |v: __m256| {
                let x = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v, l), sc), half);
                let x = _mm256_min_ps(x, top);
                _mm256_max_epi32(_mm256_cvttps_epi32(x), _mm256_setzero_si256())
            };
            // SAFETY: `t` is 16 floats, `out` 16 bytes; unaligned loads and store.
            unsafe {
                let a = q(_mm256_loadu_ps(t.as_ptr()));
                let b = q(_mm256_loadu_ps(t.as_ptr().add(8)));
                // packus interleaves the 128-bit lanes: [a0-3 b0-3 a4-7 b4-7] back in order.
                let p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0b11_01_10_00);
                let p = _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                _mm_storeu_si128(out.as_mut_ptr().cast(), p);
            }
        }
    }

    /// From each sub-quantizer's smallest (`mins`, filled) and largest (`his`) entries: the
    /// offset, scale and slack, the same in every kernel. Returns the scale.
    ///
    /// The sums run in eight lanes (row r in lane r % 8, the lanes then summed in order):
    /// short chains of additions, where one chain over every row had set the pace of a
    /// list's table.
    #[inline(always)]
    fn scales(&mut self, his: &[f32]) -> f32 {
        const L: usize = 8;
        let nsub = his.len();
        let (mut offset, mut magnitude) = ([0f32; L], [0f32; L]);
        // The two widest sub-quantizers' spans, per lane. The scale fits the second: the
        // widest (often the error level's row, two to four times the others') saturates at
        // 255 where it is above it, which only lowers a byte sum, so the sums stay lower
        // bounds with steps up to a few times finer for every other row.
        let (mut widest, mut second) = ([0f32; L], [0f32; L]);
        let mut lane = |l: usize, lo: f32, hi: f32| {
            offset[l] += lo;
            let w = hi - lo;
            second[l] = second[l].max(widest[l].min(w));
            widest[l] = widest[l].max(w);
            magnitude[l] += lo.abs().max(hi.abs());
        };
        let (los, his_) = (self.mins[..nsub].chunks_exact(L), his.chunks_exact(L));
        let (lr, hr) = (los.remainder(), his_.remainder());
        for (lo, hi) in los.zip(his_) {
            for l in 0..L {
                lane(l, lo[l], hi[l]);
            }
        }
        for (l, (&lo, &hi)) in lr.iter().zip(hr).enumerate() {
            lane(l, lo, hi);
        }
        // The two widest of all: the two widest of the lanes' two widest.
        let (mut top, mut span) = (0f32, 0f32);
        for w in widest.into_iter().chain(second) {
            (top, span) = (top.max(w), span.max(top.min(w)));
        }
        let span = if nsub == 1 { top } else { span };
        let (offset, magnitude) = (offset.iter().sum::<f32>(), magnitude.iter().sum::<f32>());
        let scale = if span > 0.0 { 255.0 / span } else { 1.0 };
        // Each entry is off by at most half a step (the rounding) plus a hair for the float
        // arithmetic of the scaling, hence 0.501; the float scan's own sums round by half an
        // ulp per addition, which 4e-5 of the magnitudes covers for 256 of them with room.
        self.slack = nsub as f32 * 0.501 / scale + 4e-5 * (magnitude + offset.abs());
        self.offset = offset;
        self.scale = scale;
        scale
    }
}

/// The byte sums of one block's 32 vectors: the reference every kernel equals.
pub(crate) fn block_sums_scalar(block: &[u8], table: &[u8], out: &mut [u16; BLOCK]) {
    *out = [0; BLOCK];
    for (codes, t) in block.chunks_exact(16).zip(table.chunks_exact(16)) {
        for (i, &c) in codes.iter().enumerate() {
            out[i] = out[i].wrapping_add(t[(c & 15) as usize] as u16);
            out[i + 16] = out[i + 16].wrapping_add(t[(c >> 4) as usize] as u16);
        }
    }
}

/// `block_sums_scalar` with AVX2: two sub-quantizers per step, one table in each 128-bit
/// lane, `vpshufb` looking up 32 sub-codes at once.
///
/// # Safety
/// The CPU has AVX2; `block` and `table` hold the same even number of 16-byte rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn block_sums_avx2(block: &[u8], table: &[u8], out: &mut [u16; BLOCK]) {
    use std::arch::x86_64::*;
    debug_assert!(block.len() == table.len() && block.len().is_multiple_of(32));
    let mut acc = [_mm256_setzero_si256(); 4];
    for (c, t) in block.chunks_exact(32).zip(table.chunks_exact(32)) {
        add_pair_avx2(c, t, &mut acc);
    }
    store_avx2(&acc, out);
}

/// One AVX2 step: the sums of a pair of sub-quantizers (32 bytes of `codes` and of `table`)
/// added to `acc`, whose lanes each hold one of the pair. acc[0] holds vectors 0-7, acc[1]
/// 8-15, acc[2] 16-23, acc[3] 24-31.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn add_pair_avx2(codes: &[u8], table: &[u8], acc: &mut [std::arch::x86_64::__m256i; 4]) {
    use std::arch::x86_64::*;
    assert!(codes.len() >= 32 && table.len() >= 32);
    let (low, zero) = (_mm256_set1_epi8(0x0f), _mm256_setzero_si256());
    // SAFETY: both slices hold 32 bytes (checked above); unaligned loads.
    let (c, t) = unsafe {
        (
            _mm256_loadu_si256(codes.as_ptr().cast()),
            _mm256_loadu_si256(table.as_ptr().cast()),
        )
    };
    let lo = _mm256_shuffle_epi8(t, _mm256_and_si256(c, low));
    let hi = _mm256_shuffle_epi8(t, _mm256_and_si256(_mm256_srli_epi16(c, 4), low));
    acc[0] = _mm256_add_epi16(acc[0], _mm256_unpacklo_epi8(lo, zero));
    acc[1] = _mm256_add_epi16(acc[1], _mm256_unpackhi_epi8(lo, zero));
    acc[2] = _mm256_add_epi16(acc[2], _mm256_unpacklo_epi8(hi, zero));
    acc[3] = _mm256_add_epi16(acc[3], _mm256_unpackhi_epi8(hi, zero));
}

/// Adds each accumulator's two lanes (one sub-quantizer of every pair each) into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn store_avx2(acc: &[std::arch::x86_64::__m256i; 4], out: &mut [u16; BLOCK]) {
    use std::arch::x86_64::*;
    for (a, o) in acc.iter().zip(out.chunks_exact_mut(8)) {
        let s = _mm_add_epi16(_mm256_castsi256_si128(*a), _mm256_extracti128_si256(*a, 1));
        // SAFETY: `o` is 8 u16.
        unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), s) };
    }
}

/// `block_sums_avx2` with AVX-512: four sub-quantizers per step, one table in each 128-bit
/// lane; a last pair (the rows are even, not always a multiple of four) takes the AVX2 step.
///
/// # Safety
/// The CPU has AVX-512BW; `block` and `table` hold the same even number of 16-byte rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw")]
pub(crate) unsafe fn block_sums_avx512(block: &[u8], table: &[u8], out: &mut [u16; BLOCK]) {
    use std::arch::x86_64::*;
    debug_assert!(block.len() == table.len() && block.len().is_multiple_of(32));
    let low = _mm512_set1_epi8(0x0f);
    let zero = _mm512_setzero_si512();
    let mut acc = [zero; 4];
    let quads = block.len() / 64 * 64;
    for (c, t) in block[..quads]
        .chunks_exact(64)
        .zip(table[..quads].chunks_exact(64))
    {
        // SAFETY: both chunks are 64 bytes; unaligned loads.
        let (c, t) = unsafe {
            (
                _mm512_loadu_si512(c.as_ptr().cast()),
                _mm512_loadu_si512(t.as_ptr().cast()),
            )
        };
        let lo = _mm512_shuffle_epi8(t, _mm512_and_si512(c, low));
        let hi = _mm512_shuffle_epi8(t, _mm512_and_si512(_mm512_srli_epi16(c, 4), low));
        acc[0] = _mm512_add_epi16(acc[0], _mm512_unpacklo_epi8(lo, zero));
        acc[1] = _mm512_add_epi16(acc[1], _mm512_unpackhi_epi8(lo, zero));
        acc[2] = _mm512_add_epi16(acc[2], _mm512_unpacklo_epi8(hi, zero));
        acc[3] = _mm512_add_epi16(acc[3], _mm512_unpackhi_epi8(hi, zero));
    }
    // Fold the 512-bit sums to 256 bits, then add the last pair as the AVX2 kernel does.
    let mut half =
        acc.map(|a| _mm256_add_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1)));
    if quads < block.len() {
        add_pair_avx2(&block[quads..], &table[quads..], &mut half);
    }
    store_avx2(&half, out);
}

/// `block_sums_scalar` with NEON (always there on aarch64): one sub-quantizer per step,
/// `tbl` looking up 16 sub-codes at once in each half of the block.
#[cfg(target_arch = "aarch64")]
pub(crate) fn block_sums_neon(block: &[u8], table: &[u8], out: &mut [u16; BLOCK]) {
    use std::arch::aarch64::*;
    // SAFETY: NEON is part of aarch64; every load and store stays within 16-byte rows and
    // the 8-lane quarters of `out`.
    unsafe {
        let low = vdupq_n_u8(0x0f);
        let mut acc = [vdupq_n_u16(0); 4];
        for (c, t) in block.chunks_exact(16).zip(table.chunks_exact(16)) {
            let (c, t) = (vld1q_u8(c.as_ptr()), vld1q_u8(t.as_ptr()));
            let lo = vqtbl1q_u8(t, vandq_u8(c, low));
            let hi = vqtbl1q_u8(t, vshrq_n_u8::<4>(c));
            acc[0] = vaddw_u8(acc[0], vget_low_u8(lo));
            acc[1] = vaddw_high_u8(acc[1], lo);
            acc[2] = vaddw_u8(acc[2], vget_low_u8(hi));
            acc[3] = vaddw_high_u8(acc[3], hi);
        }
        for (a, o) in acc.iter().zip(out.chunks_exact_mut(8)) {
            vst1q_u16(o.as_mut_ptr(), *a);
        }
    }
}

/// One block's sums through the kernel `each_block` picks: what the tests compare.
#[cfg(test)]
pub(crate) fn block_sums(block: &[u8], table: &[u8], out: &mut [u16; BLOCK]) {
    each_block(block, table, |_, s| {
        *out = *s;
        Ok::<(), ()>(())
    })
    .unwrap()
}

/// Calls `f(block number, its sums)` for each block of `packed` (a list's blocks) under one
/// table, the kernel chosen once per call so that it inlines into the loop.
#[inline(always)]
pub(crate) fn each_block<E>(
    packed: &[u8],
    table: &[u8],
    f: impl FnMut(usize, &[u16; BLOCK]) -> Result<(), E>,
) -> Result<(), E> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: AVX-512BW checked.
            return unsafe { each_block_avx512(packed, table, f) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 checked.
            return unsafe { each_block_avx2(packed, table, f) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    return each_block_with(packed, table, block_sums_neon, f);
    #[allow(unreachable_code)]
    each_block_with(packed, table, block_sums_scalar, f)
}

/// # Safety
/// The CPU has AVX-512BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512bw")]
unsafe fn each_block_avx512<E>(
    packed: &[u8],
    table: &[u8],
    f: impl FnMut(usize, &[u16; BLOCK]) -> Result<(), E>,
) -> Result<(), E> {
    // SAFETY: AVX-512BW is enabled here; every block has the table's rows.
    let kernel = |b: &[u8], t: &[u8], o: &mut [u16; BLOCK]| unsafe { block_sums_avx512(b, t, o) };
    each_block_with(packed, table, kernel, f)
}

/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn each_block_avx2<E>(
    packed: &[u8],
    table: &[u8],
    f: impl FnMut(usize, &[u16; BLOCK]) -> Result<(), E>,
) -> Result<(), E> {
    // SAFETY: AVX2 is enabled here; every block has the table's rows.
    let kernel = |b: &[u8], t: &[u8], o: &mut [u16; BLOCK]| unsafe { block_sums_avx2(b, t, o) };
    each_block_with(packed, table, kernel, f)
}

/// The lanes of `sums` (the first `valid`) whose `floor + s * step` is not above `bound`, as
/// bits: the scan's float test, the same operations a lane at a time, which the compiler
/// turns into a few vector compares.
#[inline(always)]
pub(crate) fn within(sums: &[u16; BLOCK], valid: usize, floor: f32, step: f32, bound: f32) -> u32 {
    // The lanes above `bound`, then the rest (a NaN sum is not above it: the scan scores it).
    let mut above = 0u32;
    for (t, &s) in sums.iter().enumerate() {
        above |= u32::from(floor + s as f32 * step > bound) << t;
    }
    match valid {
        0..BLOCK => !above & ((1u32 << valid) - 1),
        _ => !above,
    }
}

#[inline(always)]
fn each_block_with<E>(
    packed: &[u8],
    table: &[u8],
    kernel: impl Fn(&[u8], &[u8], &mut [u16; BLOCK]),
    mut f: impl FnMut(usize, &[u16; BLOCK]) -> Result<(), E>,
) -> Result<(), E> {
    let mut sums = [0u16; BLOCK];
    for (b, block) in packed.chunks_exact(table.len()).enumerate() {
        kernel(block, table, &mut sums);
        f(b, &sums)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn code_at_reads_back_what_pack_wrote() {
        let mut seed = 3;
        for nsub in [1usize, 2, 7, 32] {
            let nbytes = nsub.div_ceil(2);
            let n = 70;
            let mut codes: Vec<u8> = (0..n * nbytes).map(|_| lcg(&mut seed) as u8).collect();
            if nsub % 2 == 1 {
                // The last byte's high nibble is no sub-code.
                codes
                    .chunks_exact_mut(nbytes)
                    .for_each(|c| c[nbytes - 1] &= 15);
            }
            let packed = pack(&codes, nsub);
            let bb = block_bytes(nsub);
            for (v, code) in codes.chunks_exact(nbytes).enumerate() {
                let block = &packed[v / BLOCK * bb..(v / BLOCK + 1) * bb];
                for j in 0..nsub {
                    assert_eq!(
                        code_at(block, v % BLOCK, j),
                        get_code(code, j, 4),
                        "nsub {nsub}"
                    );
                }
            }
        }
    }

    #[test]
    fn within_is_the_float_test_lane_by_lane() {
        use std::cmp::Ordering::Greater;
        let mut seed = 5;
        let mut sums = [0u16; BLOCK];
        for bound in [
            f32::NEG_INFINITY,
            -1.0,
            0.3,
            7.5,
            1e9,
            f32::INFINITY,
            f32::NAN,
        ] {
            for valid in [0usize, 1, 17, BLOCK, 1000] {
                sums.iter_mut().for_each(|s| *s = lcg(&mut seed) as u16);
                let (floor, step) = (-2.0f32, 1.3e-4f32);
                let mask = within(&sums, valid, floor, step, bound);
                for (t, &s) in sums.iter().enumerate() {
                    let above = (floor + s as f32 * step).partial_cmp(&bound) == Some(Greater);
                    let want = t < valid && !above;
                    assert_eq!(
                        mask >> t & 1 == 1,
                        want,
                        "bound {bound} valid {valid} lane {t}"
                    );
                }
            }
        }
    }

    /// A random float table (`nsub` x 16) of values within `spread` of 3, its last row
    /// `wide` times wider (as an error level's row is, to a few times).
    fn table(seed: &mut u64, nsub: usize, spread: f32, wide: f32) -> Vec<f32> {
        (0..nsub * 16)
            .map(|i| {
                let w = if i / 16 == nsub - 1 { wide } else { 1.0 };
                (lcg(seed) as f32 / (1u64 << 31) as f32 - 0.5) * spread * w + 3.0
            })
            .collect()
    }

    #[test]
    fn byte_sums_bound_the_float_sums_from_below() {
        let mut seed = 5;
        for nsub in [1usize, 2, 7, 64, 256] {
            for (spread, wide) in [(1e-3f32, 1.0), (1.0, 1.0), (1.0, 4.0), (1.0, 1e9)] {
                let lut = table(&mut seed, nsub, spread, wide);
                let mut t = ByteTable::new(nsub);
                t.fill(&lut);
                for _ in 0..200 {
                    let code: Vec<usize> =
                        (0..nsub).map(|_| lcg(&mut seed) as usize % 16).collect();
                    let exact: f32 = code.iter().enumerate().map(|(j, &c)| lut[j * 16 + c]).sum();
                    let s: u32 = code
                        .iter()
                        .enumerate()
                        .map(|(j, &c)| t.bytes[j * 16 + c] as u32)
                        .sum();
                    let lower = t.offset + s as f32 / t.scale - t.slack;
                    assert!(lower <= exact, "nsub {nsub} wide {wide}: {lower} > {exact}");
                }
            }
        }
    }

    #[test]
    fn the_simd_table_equals_the_reference_bit_for_bit() {
        let mut seed = 11;
        for nsub in [1usize, 2, 7, 64, 256] {
            for (spread, wide) in [
                (0.0f32, 1.0),
                (1e-3, 1.0),
                (1.0, 1.0),
                (1e4, 1.0),
                (1.0, 1e9),
            ] {
                let lut = table(&mut seed, nsub, spread, wide);
                let mut want = ByteTable::new(nsub);
                want.fill_scalar(&lut);
                let mut got = ByteTable::new(nsub);
                got.fill(&lut);
                assert_eq!(got.bytes, want.bytes, "nsub {nsub} spread {spread}");
                assert_eq!(got.mins, want.mins);
                let bits =
                    |t: &ByteTable| [t.offset.to_bits(), t.scale.to_bits(), t.slack.to_bits()];
                assert_eq!(bits(&got), bits(&want), "nsub {nsub} spread {spread}");
            }
        }
    }

    #[test]
    fn the_simd_sums_equal_the_reference_bit_for_bit() {
        let mut seed = 7;
        for nsub in [1usize, 2, 3, 8, 17, 64, 255, 256] {
            let nbytes = nsub.div_ceil(2);
            let n = 75; // two full blocks and a ragged one
            let codes: Vec<u8> = (0..n * nbytes).map(|_| lcg(&mut seed) as u8).collect();
            // Odd nsub: the last byte's high nibble is no sub-code.
            let codes: Vec<u8> = codes
                .chunks(nbytes)
                .flat_map(|c| {
                    let mut c = c.to_vec();
                    if nsub % 2 == 1 {
                        *c.last_mut().unwrap() &= 15;
                    }
                    c
                })
                .collect();
            let packed = pack(&codes, nsub);
            let mut table = vec![0u8; block_bytes(nsub)];
            for t in table[..nsub * 16].iter_mut() {
                *t = lcg(&mut seed) as u8;
            }
            for (b, block) in packed.chunks_exact(block_bytes(nsub)).enumerate() {
                let mut want = [0u16; BLOCK];
                block_sums_scalar(block, &table, &mut want);
                // The reference against the row-major codes it was packed from.
                for t in 0..BLOCK.min(n - b * BLOCK) {
                    let code = &codes[(b * BLOCK + t) * nbytes..][..nbytes];
                    let s: u32 = (0..nsub)
                        .map(|j| table[j * 16 + get_code(code, j, 4) as usize] as u32)
                        .sum();
                    assert_eq!(want[t] as u32, s, "nsub {nsub} block {b} vector {t}");
                }
                let mut got = [0u16; BLOCK];
                block_sums(block, &table, &mut got);
                assert_eq!(got, want, "nsub {nsub} block {b}");
                // Each kernel this CPU can run, not only the one `block_sums` picks.
                #[cfg(target_arch = "x86_64")]
                {
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: AVX2 checked; packed blocks and tables have equal rows.
                        unsafe { block_sums_avx2(block, &table, &mut got) };
                        assert_eq!(got, want, "avx2: nsub {nsub} block {b}");
                    }
                    if std::arch::is_x86_feature_detected!("avx512bw") {
                        // SAFETY: AVX-512BW checked, as above.
                        unsafe { block_sums_avx512(block, &table, &mut got) };
                        assert_eq!(got, want, "avx512: nsub {nsub} block {b}");
                    }
                }
            }
        }
    }
}
