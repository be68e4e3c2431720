// Nearest-anchor assignment on cooperative matrices (tensor cores), for adapters that have
// them with fp16 inputs and fp32 sums: the same answers as `assign` in dots.wgsl.
//
// `halves` scales each row by a power of two (its largest value lands in [2^14, 2^15)) and
// rounds it to fp16, keeping the unscale, the norm and the rounding's relative size
// e = |x~ - x| / |x| it measured. `assign_mma` multiplies the fp16 rows on cooperative
// matrices, unscales exactly and keeps per row the best score and a bound on the rest. Each
// approximate dot is within (e_x + e_c + delta) |x| |c| of fp32's, delta covering the
// cross term and both fp32 sums (2^-20 + d 2^-22), so each score is within
// E_j = 2 |x| |c_j| (e_x + e_c + delta) + 2^-22 |off_j| of the score fp32 gives. Where no
// other column's score minus its bound reaches the winner's plus its bound, the winner is
// fp32's (ties included: they always fail the test), and its distance is taken in fp32.
// Other rows are listed; dots.wgsl's `assign` scans them again in fp32.

enable f16;
enable wgpu_cooperative_matrix;

struct Params {
    m: u32,        // rows of this block
    n: u32,        // anchors
    d: u32,        // dimension of the fp32 rows
    row0: u32,     // the block's first global row (assign_mma's outputs)
    use_bias: u32, // subtract bias[j] back out of the reported distance
    groups_x: u32, // workgroups along x, for grids folded into two dimensions
    dp: u32,       // dimension of the fp16 rows: d rounded up to 16
    _p0: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
// assign_mma
@group(0) @binding(1) var<storage, read> xa: array<f32>;          // points, fp32 (m x d)
@group(0) @binding(2) var<storage, read> xb: array<f32>;          // anchors, fp32 (n x d)
@group(0) @binding(3) var<storage, read> xh: array<vec4<f16>>;    // points' halves
@group(0) @binding(4) var<storage, read> bh: array<vec4<f16>>;    // anchors' halves
@group(0) @binding(5) var<storage, read> xs: array<vec4<f32>>;    // points' scales
@group(0) @binding(6) var<storage, read> bs: array<vec4<f32>>;    // anchors' scales
@group(0) @binding(7) var<storage, read> off: array<f32>;         // |c_j|^2 [+ bias_j]
@group(0) @binding(8) var<storage, read> bias: array<f32>;
@group(0) @binding(9) var<storage, read> an: array<f32>;          // |x|^2, global rows
@group(0) @binding(10) var<storage, read_write> assigned: array<u32>;
@group(0) @binding(11) var<storage, read_write> dist: array<f32>;
// Rows left for fp32: their count, then the rows (within the block).
@group(0) @binding(12) var<storage, read_write> listed: array<atomic<u32>>;
// halves
@group(0) @binding(13) var<storage, read> src: array<f32>;
@group(0) @binding(14) var<storage, read_write> dst: array<f16>;
@group(0) @binding(15) var<storage, read_write> scale: array<vec4<f32>>;

// Threads per workgroup of `halves`: set when the pipelines are built.
const WG: u32 = 256u;
// The adapter's subgroup size: set when the pipelines are built. Each subgroup owns 16 rows.
const SG: u32 = 32u;
const NSG: u32 = 256u / SG;
// Rows per workgroup and anchors per chunk of assign_mma.
const R: u32 = 16u * NSG;
const CH: u32 = 64u;
// Threads per row in the scan of a chunk, and the chunk's columns each takes.
const TR: u32 = 256u / R;
const CPT: u32 = CH / TR;
const INF: f32 = 3.40282347e38;
const NONE: u32 = 0xffffffffu;

// A chunk's dots, column-major (row r, column c at c * R + r: a warp's rows are adjacent
// words); after the last chunk, the threads' candidates.
var<workgroup> tile: array<f32, CH * R>;
// Per column of the chunk: offset, 2 x unscale, norm, rounding error.
var<workgroup> col: array<vec4<f32>, CH>;
// 16 columns of the rows' and the chunk's halves, rows 24 halves (48 bytes) apart: the eight
// 16-byte rows a matrix load reads at once fall on different banks.
const SK: u32 = 24u;
var<workgroup> sa: array<f16, R * SK>;
var<workgroup> sb: array<f16, CH * SK>;
// Each row's winner where the fp16 products decided it, else NONE.
var<workgroup> won: array<u32, R>;

// y rounded to nearest (even) at fp16's 11 bits, as an f32, so that f16() of it is exact
// whatever rounding the device's conversion uses, and no compiler can fold the measured
// error away. Values under fp16's normal range (below 2^-28 of the row's largest) go to 0.
fn to_half(y: f32) -> f32 {
    if (abs(y) < 6.103515625e-5) {
        return 0.0;
    }
    let b = bitcast<u32>(y);
    return bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
}

// Halves of rows 0..m of `src` (m x d) into `dst` (rows of dp; the padding stays zero) and
// their (unscale, relative error, norm, 0) into `scale`.
@compute @workgroup_size(WG)
fn halves(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let r = (wg.y * P.groups_x + wg.x) * WG + li;
    if (r >= P.m) {
        return;
    }
    let o = r * P.d;
    var mx = 0.0;
    for (var t = 0u; t < P.d; t++) {
        mx = max(mx, abs(src[o + t]));
    }
    let e = i32((bitcast<u32>(mx) >> 23u) & 0xffu);
    let s = clamp(141 - e, -126, 126);
    let up = bitcast<f32>(u32(127 + s) << 23u);
    var n2 = 0.0;
    var e2 = 0.0;
    let h = r * P.dp;
    for (var t = 0u; t < P.d; t++) {
        let y = src[o + t] * up;
        let v = to_half(y);
        // Exact: v is y rounded to fp16's precision, within one step of it.
        let gap = y - v;
        n2 += y * y;
        e2 += gap * gap;
        dst[h + t] = f16(v);
    }
    // The margin covers the sums' own rounding.
    var rel = 0.0;
    if (n2 > 0.0) {
        rel = sqrt(e2 / n2) * 1.001;
    }
    let un = bitcast<f32>(u32(127 - s) << 23u);
    scale[r] = vec4<f32>(un, rel, sqrt(n2) * un, 0.0);
}

// The best of one thread's columns and the lowest of the others' lower bounds.
struct Cand {
    s: f32,   // best approximate score
    at: u32,  // its column
    hi: f32,  // its score plus bound
    lo: f32,  // its score minus bound
    rest: f32, // the lowest score minus bound among the thread's other columns
}

// Four halves of `v` into workgroup memory at `o` (of `sa`, or `sb` with `of_b`).
fn put4(of_b: bool, o: u32, v: vec4<f16>) {
    for (var i = 0u; i < 4u; i++) {
        if (of_b) {
            sb[o + i] = v[i];
        } else {
            sa[o + i] = v[i];
        }
    }
}

// Columns 4 t4 .. 4 t4 + 15 of the workgroup's rows (from i0) and of the chunk's anchors
// (from j0) into `sa` and `sb`; rows are w4 pieces of four halves.
fn stage_slice(li: u32, i0: u32, j0: u32, t4: u32, w4: u32) {
    for (var e = li; e < R * 4u; e += 256u) {
        put4(false, (e / 4u) * SK + 4u * (e % 4u), xh[(i0 + e / 4u) * w4 + t4 + e % 4u]);
    }
    put4(true, (li / 4u) * SK + 4u * (li % 4u), bh[(j0 + li / 4u) * w4 + t4 + li % 4u]);
}

@compute @workgroup_size(256)
fn assign_mma(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sid: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
    @builtin(num_subgroups) groups: u32,
) {
    let i0 = (wg.y * P.groups_x + wg.x) * R;
    if (i0 >= P.m) {
        return;
    }
    let r = li % R;
    let part = li / R;
    let live = i0 + r < P.m;
    var sx = vec4<f32>(0.0);
    if (live) {
        sx = xs[i0 + r];
    }
    let x2 = 2.0 * sx.z;
    let ex = sx.y + 9.5367431640625e-7 + f32(P.d) * 2.384185791015625e-7;
    var b = Cand(INF, NONE, INF, INF, INF);
    // Rows are dp / 4 pieces of four halves; each thread moves whole pieces.
    let w4 = P.dp / 4u;
    for (var j0 = 0u; j0 < P.n; j0 += CH) {
        if (li < CH) {
            let j = min(j0 + li, P.n - 1u);
            let s = bs[j];
            col[li] = vec4<f32>(off[j], 2.0 * s.x, s.z, s.y);
        }
        // Anchor rows past n are zero padding: their dots are computed, never read.
        // products: begin (the chunk's dots into `tile`)
        var c0 = coop_mat16x16<f32, C>();
        var c1 = coop_mat16x16<f32, C>();
        var c2 = coop_mat16x16<f32, C>();
        var c3 = coop_mat16x16<f32, C>();
        for (var t4 = 0u; t4 < w4; t4 += 4u) {
            stage_slice(li, i0, j0, t4, w4);
            workgroupBarrier();
            let a = coopLoadT<coop_mat16x16<f16, A>>(&sa[16u * sid * SK], SK);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&sb[0u], SK);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&sb[16u * SK], SK);
            let b2 = coopLoad<coop_mat16x16<f16, B>>(&sb[32u * SK], SK);
            let b3 = coopLoad<coop_mat16x16<f16, B>>(&sb[48u * SK], SK);
            c0 = coopMultiplyAdd(a, b0, c0);
            c1 = coopMultiplyAdd(a, b1, c1);
            c2 = coopMultiplyAdd(a, b2, c2);
            c3 = coopMultiplyAdd(a, b3, c3);
            workgroupBarrier();
        }
        let mine = 16u * sid;
        coopStore(c0, &tile[mine], R);
        coopStore(c1, &tile[16u * R + mine], R);
        coopStore(c2, &tile[32u * R + mine], R);
        coopStore(c3, &tile[48u * R + mine], R);
        // products: end
        workgroupBarrier();
        let cols = min(CH, P.n - j0);
        for (var q = 0u; q < CPT; q++) {
            let c = part * CPT + q;
            if (c < cols) {
                let cv = col[c];
                let s = cv.x - tile[c * R + r] * cv.y * sx.x;
                let e = x2 * cv.z * (ex + cv.w) + abs(cv.x) * 2.384185791015625e-7;
                if (s < b.s) {
                    b = Cand(s, j0 + c, s + e, s - e, min(b.rest, b.lo));
                } else {
                    b.rest = min(b.rest, s - e);
                }
            }
        }
        workgroupBarrier();
    }
    // The TR threads of each row meet in workgroup memory.
    tile[li] = b.s;
    tile[256u + li] = bitcast<f32>(b.at);
    tile[512u + li] = b.hi;
    tile[768u + li] = b.lo;
    tile[1024u + li] = b.rest;
    workgroupBarrier();
    if (part == 0u) {
        var w = r;
        for (var p = 1u; p < TR; p++) {
            let o = p * R + r;
            let a = bitcast<u32>(tile[256u + o]);
            let wa = bitcast<u32>(tile[256u + w]);
            if (tile[o] < tile[w] || (tile[o] == tile[w] && a < wa)) {
                w = o;
            }
        }
        var at = bitcast<u32>(tile[256u + w]);
        var rest = INF;
        for (var p = 0u; p < TR; p++) {
            let o = p * R + r;
            rest = min(rest, tile[1024u + o]);
            if (o != w) {
                rest = min(rest, tile[768u + o]);
            }
        }
        if (live && (at == NONE || rest <= tile[512u + w])) {
            let k = atomicAdd(&listed[0], 1u);
            atomicStore(&listed[1u + k], i0 + r);
            at = NONE;
        }
        won[r] = select(NONE, at, live);
    }
    workgroupBarrier();
    // The winners' scores in fp32: a subgroup per row, its lanes across the dimension.
    for (var rr = sid; rr < R; rr += groups) {
        let at = won[rr];
        let xo = (i0 + rr) * P.d;
        let co = min(at, P.n - 1u) * P.d;
        var part_dot = 0.0;
        if (at != NONE) {
            for (var t = lane; t < P.d; t += lanes) {
                part_dot += xa[xo + t] * xb[co + t];
            }
        }
        let dot = subgroupAdd(part_dot);
        if (lane == 0u && at != NONE) {
            let g = P.row0 + i0 + rr;
            var dv = an[g] + (off[at] - 2.0 * dot);
            if (P.use_bias != 0u) {
                dv -= bias[at];
            }
            assigned[g] = at;
            dist[g] = max(dv, 0.0);
        }
    }
}
