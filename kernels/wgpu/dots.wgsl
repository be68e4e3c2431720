// Row-by-row dot products tiled through workgroup memory: the GEMM of the WGPU backend.
// `dots` writes C = A B^T (m x n). `assign` keeps, for each row i of A, the column j
// minimizing off[j] - 2 a_i.b_j (off = |b_j|^2 + bias_j), first on ties, without writing C:
// the k-means and nearest-anchor assignment.
//
// A workgroup of 16 x 16 threads owns a 128-row tile of A; each thread accumulates an 8 x 8
// block of dot products (rows 4ty.. and 64 + 4ty.., columns 4tx.. and 64 + 4tx..) while
// TK-wide slices of A and B pass through workgroup memory: 64 multiply-adds per 4 loads.

struct Params {
    m: u32,        // rows of A in this dispatch
    n: u32,        // rows of B
    k: u32,        // shared dimension
    row0: u32,     // first row of this block of A in the per-row outputs (assign)
    use_bias: u32, // assign: subtract bias[j] back out of the reported distance
    groups_x: u32, // workgroups along x, for grids folded into two dimensions
    listed: u32,   // assign: the rows of A are those `listed` names (mma.wgsl leaves them)
    _p1: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> xa: array<f32>;
@group(0) @binding(2) var<storage, read> xb: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> off: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read> an: array<f32>;
@group(0) @binding(7) var<storage, read_write> assigned: array<u32>;
@group(0) @binding(8) var<storage, read_write> dist: array<f32>;
// With P.listed: the number of rows of A, then their indices.
@group(0) @binding(9) var<storage, read> rows_of_a: array<u32>;

const T: u32 = 128u;
// Shared-dimension step: 8, or 16 where the adapter has 24 KB of workgroup memory (set when
// the pipelines are built; a longer step halves the barriers per multiply-add).
const TK: u32 = 8u;
// The largest float: above any real score (WGSL has no infinity literal).
const INF: f32 = 3.40282347e38;
const NONE: u32 = 0xffffffffu;

// Slices of A and B: element (t, r) of the TK x 128 slice at [t * S + r / 4][r % 4]. S = 33,
// not 32, so the stores of one warp, which differ in t, spread over the memory banks (at most
// two to a bank) instead of piling onto a few.
const S: u32 = 33u;
var<workgroup> sa: array<vec4<f32>, TK * S>;
var<workgroup> sb: array<vec4<f32>, TK * S>;
// assign: once the slices are spent, each thread's best per row goes into them (score in sa,
// column in sb as its bits), merged across the 16 threads sharing the rows, one half of the
// tile's rows at a time.

// Rows of A: P.m, or the count of the listed ones.
fn a_rows() -> u32 {
    if (P.listed != 0u) {
        return rows_of_a[0];
    }
    return P.m;
}

// Row i of A within the block: i, or the i-th listed one.
fn a_row(i: u32) -> u32 {
    if (P.listed != 0u) {
        return rows_of_a[1u + i];
    }
    return i;
}

// Four consecutive values, columns t.. of row `row`, of A (or of B with `of_b`): zeros past
// the ends.
fn load4(of_b: bool, row: u32, t: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    if (row >= select(a_rows(), P.n, of_b)) {
        return v;
    }
    let o = select(a_row(row), row, of_b) * P.k + t;
    if (t + 3u < P.k) {
        if (of_b) {
            return vec4<f32>(xb[o], xb[o + 1u], xb[o + 2u], xb[o + 3u]);
        }
        return vec4<f32>(xa[o], xa[o + 1u], xa[o + 2u], xa[o + 3u]);
    }
    for (var c = 0u; t + c < P.k; c++) {
        if (of_b) {
            v[c] = xb[o + c];
        } else {
            v[c] = xa[o + c];
        }
    }
    return v;
}

// Piece `e` of a slice starting at column t0 (four columns of one row; a slice has T * TK / 4
// pieces, so each thread fetches TK / 8 of A and as many of B).
fn fetch(of_b: bool, r0: u32, t0: u32, e: u32) -> vec4<f32> {
    return load4(of_b, r0 + e / (TK / 4u), t0 + 4u * (e % (TK / 4u)));
}

// Piece `e` of A's slice and of B's into workgroup memory.
fn put_piece(e: u32, a: vec4<f32>, b: vec4<f32>) {
    let r = e / (TK / 4u);
    let i = 4u * (e % (TK / 4u)) * S + r / 4u;
    sa[i][r % 4u] = a.x;
    sa[i + S][r % 4u] = a.y;
    sa[i + 2u * S][r % 4u] = a.z;
    sa[i + 3u * S][r % 4u] = a.w;
    sb[i][r % 4u] = b.x;
    sb[i + S][r % 4u] = b.y;
    sb[i + 2u * S][r % 4u] = b.z;
    sb[i + 3u * S][r % 4u] = b.w;
}

// acc[2 r + g][c] = a_(i0 + row r) . b_(j0 + column (g, c)) for this thread, r < 8: rows
// 4 ty + r (r < 4) and 64 + 4 ty + r - 4; columns 4 tx + c (g = 0) and 64 + 4 tx + c (g = 1).
// Every index below is a constant, so the accumulators stay in registers. The next slices'
// values are fetched into registers before this slice's products, so the device reads while
// it multiplies.
fn tile(i0: u32, j0: u32, lid: vec3<u32>) -> array<vec4<f32>, 16> {
    var acc: array<vec4<f32>, 16>;
    let tid = lid.y * 16u + lid.x;
    let two = TK == 16u;
    var pa0 = fetch(false, i0, 0u, tid);
    var pb0 = fetch(true, j0, 0u, tid);
    var pa1 = vec4<f32>(0.0);
    var pb1 = vec4<f32>(0.0);
    if (two) {
        pa1 = fetch(false, i0, 0u, tid + 256u);
        pb1 = fetch(true, j0, 0u, tid + 256u);
    }
    for (var t0 = 0u; t0 < P.k; t0 += TK) {
        put_piece(tid, pa0, pb0);
        if (two) {
            put_piece(tid + 256u, pa1, pb1);
        }
        workgroupBarrier();
        let nt = t0 + TK;
        if (nt < P.k) {
            pa0 = fetch(false, i0, nt, tid);
            pb0 = fetch(true, j0, nt, tid);
            if (two) {
                pa1 = fetch(false, i0, nt, tid + 256u);
                pb1 = fetch(true, j0, nt, tid + 256u);
            }
        }
        for (var t = 0u; t < TK; t++) {
            let a0 = sa[t * S + lid.y];
            let a1 = sa[t * S + 16u + lid.y];
            let b0 = sb[t * S + lid.x];
            let b1 = sb[t * S + 16u + lid.x];
            acc[0] += a0.x * b0;
            acc[1] += a0.x * b1;
            acc[2] += a0.y * b0;
            acc[3] += a0.y * b1;
            acc[4] += a0.z * b0;
            acc[5] += a0.z * b1;
            acc[6] += a0.w * b0;
            acc[7] += a0.w * b1;
            acc[8] += a1.x * b0;
            acc[9] += a1.x * b1;
            acc[10] += a1.y * b0;
            acc[11] += a1.y * b1;
            acc[12] += a1.z * b0;
            acc[13] += a1.z * b1;
            acc[14] += a1.w * b0;
            acc[15] += a1.w * b1;
        }
        workgroupBarrier();
    }
    return acc;
}

// Four columns j.. of row i into `out`, within bounds.
fn put(i: u32, j: u32, v: vec4<f32>) {
    if (i >= P.m) {
        return;
    }
    let o = i * P.n;
    if (j < P.n) { out[o + j] = v.x; }
    if (j + 1u < P.n) { out[o + j + 1u] = v.y; }
    if (j + 2u < P.n) { out[o + j + 2u] = v.z; }
    if (j + 3u < P.n) { out[o + j + 3u] = v.w; }
}

@compute @workgroup_size(16, 16)
fn dots(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i0 = wg.y * T;
    let j0 = wg.x * T;
    let acc = tile(i0, j0, lid);
    let ia = i0 + 4u * lid.y;
    let ib = ia + 64u;
    let ja = j0 + 4u * lid.x;
    let jb = ja + 64u;
    put(ia, ja, acc[0]);
    put(ia, jb, acc[1]);
    put(ia + 1u, ja, acc[2]);
    put(ia + 1u, jb, acc[3]);
    put(ia + 2u, ja, acc[4]);
    put(ia + 2u, jb, acc[5]);
    put(ia + 3u, ja, acc[6]);
    put(ia + 3u, jb, acc[7]);
    put(ib, ja, acc[8]);
    put(ib, jb, acc[9]);
    put(ib + 1u, ja, acc[10]);
    put(ib + 1u, jb, acc[11]);
    put(ib + 2u, ja, acc[12]);
    put(ib + 2u, jb, acc[13]);
    put(ib + 3u, ja, acc[14]);
    put(ib + 3u, jb, acc[15]);
}

fn off_at(j: u32) -> f32 {
    return select(INF, off[min(j, P.n - 1u)], j < P.n);
}

// A row's best score so far and its column.
struct Best {
    v: f32,
    a: u32,
}

// Offers four consecutive columns' scores to one row's best (columns rise, so a strict <
// keeps the first minimum).
fn take(b: Best, s: vec4<f32>, j: u32) -> Best {
    var o = b;
    if (s.x < o.v) { o = Best(s.x, j); }
    if (s.y < o.v) { o = Best(s.y, j + 1u); }
    if (s.z < o.v) { o = Best(s.z, j + 2u); }
    if (s.w < o.v) { o = Best(s.w, j + 3u); }
    return o;
}

// Slot `i` of the merge buffer (1,024 slots: a half tile's 64 rows x 16 threads).
fn put_best(i: u32, b: Best) {
    sa[i / 4u][i % 4u] = b.v;
    sb[i / 4u][i % 4u] = bitcast<f32>(b.a);
}

fn get_best(i: u32) -> Best {
    return Best(sa[i / 4u][i % 4u], bitcast<u32>(sb[i / 4u][i % 4u]));
}

// A thread's four rows of one half (rows 4 ty .. 4 ty + 3 within it) into workgroup memory.
fn stash(slot: u32, b0: Best, b1: Best, b2: Best, b3: Best) {
    put_best(slot, b0);
    put_best(slot + 16u, b1);
    put_best(slot + 32u, b2);
    put_best(slot + 48u, b3);
}

// One row of the tile (`row` % 64 within the half in workgroup memory) from the 16 threads'
// candidates.
fn finish_row(i0: u32, row: u32) {
    if (i0 + row >= a_rows()) {
        return;
    }
    var v = INF;
    var a = NONE;
    for (var t = 0u; t < 16u; t++) {
        let o = get_best((row % 64u) * 16u + t);
        if (o.v < v || (o.v == v && o.a < a)) {
            v = o.v;
            a = o.a;
        }
    }
    if (a == NONE) {
        a = 0u; // every score was infinite or NaN
    }
    let g = P.row0 + a_row(i0 + row);
    var dv = an[g] + v;
    if (P.use_bias != 0u) {
        dv -= bias[a];
    }
    assigned[g] = a;
    dist[g] = max(dv, 0.0);
}

@compute @workgroup_size(16, 16)
fn assign(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i0 = (wg.y * P.groups_x + wg.x) * T;
    if (i0 >= a_rows()) {
        return;
    }
    let none = Best(INF, NONE);
    var best = array<Best, 8>(none, none, none, none, none, none, none, none);
    for (var j0 = 0u; j0 < P.n; j0 += T) {
        let acc = tile(i0, j0, lid);
        let ja = j0 + 4u * lid.x;
        let jb = ja + 64u;
        let oa = vec4<f32>(off_at(ja), off_at(ja + 1u), off_at(ja + 2u), off_at(ja + 3u));
        let ob = vec4<f32>(off_at(jb), off_at(jb + 1u), off_at(jb + 2u), off_at(jb + 3u));
        best[0] = take(best[0], oa - 2.0 * acc[0], ja);
        best[0] = take(best[0], ob - 2.0 * acc[1], jb);
        best[1] = take(best[1], oa - 2.0 * acc[2], ja);
        best[1] = take(best[1], ob - 2.0 * acc[3], jb);
        best[2] = take(best[2], oa - 2.0 * acc[4], ja);
        best[2] = take(best[2], ob - 2.0 * acc[5], jb);
        best[3] = take(best[3], oa - 2.0 * acc[6], ja);
        best[3] = take(best[3], ob - 2.0 * acc[7], jb);
        best[4] = take(best[4], oa - 2.0 * acc[8], ja);
        best[4] = take(best[4], ob - 2.0 * acc[9], jb);
        best[5] = take(best[5], oa - 2.0 * acc[10], ja);
        best[5] = take(best[5], ob - 2.0 * acc[11], jb);
        best[6] = take(best[6], oa - 2.0 * acc[12], ja);
        best[6] = take(best[6], ob - 2.0 * acc[13], jb);
        best[7] = take(best[7], oa - 2.0 * acc[14], ja);
        best[7] = take(best[7], ob - 2.0 * acc[15], jb);
    }
    // The rows' candidates meet in workgroup memory, one half of the tile at a time.
    let tid = lid.y * 16u + lid.x;
    let slot = 4u * lid.y * 16u + lid.x;
    stash(slot, best[0], best[1], best[2], best[3]);
    workgroupBarrier();
    if (tid < 64u) {
        finish_row(i0, tid);
    }
    workgroupBarrier();
    stash(slot, best[4], best[5], best[6], best[7]);
    workgroupBarrier();
    if (tid < 64u) {
        finish_row(i0, 64u + tid);
    }
}
