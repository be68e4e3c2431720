// Residual encoding on the WGPU backend: residuals in the padded layout, the product-quantizer
// assignment and the packing of its indices into bytes. Anchor assignment and the rotation are
// dots.wgsl's.

struct Params {
    n: u32,        // rows
    d: u32,        // input columns
    dp: u32,       // padded columns: nsub x dsub
    dsub: u32,
    ksub: u32,
    nsub: u32,
    has_anchors: u32,
    groups_x: u32, // workgroups along x, for grids folded into two dimensions
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> anchors: array<f32>;
@group(0) @binding(3) var<storage, read> assigned: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> books: array<f32>;
@group(0) @binding(6) var<storage, read_write> idx: array<u32>;
@group(0) @binding(7) var<storage, read_write> packed: array<u32>;
@group(0) @binding(8) var<storage, read> levels: array<f32>;

// Threads per workgroup and the largest sub-codebook (ksub x dsub floats) held in workgroup
// memory: set from the adapter's limits when the pipelines are built.
const WG: u32 = 256u;
const BOOK: u32 = 3584u;
// pq_assign is built per sub-vector width: D4 = ceil(dsub / 4) (at most 8) four-float pieces,
// so its loops have fixed lengths and the row's sub-vector stays in registers.
const D4: u32 = 8u;
const INF: f32 = 3.40282347e38;

var<workgroup> cb: array<vec4<f32>, BOOK / 4u>;
var<workgroup> cn: array<f32, 256>;

fn linear(wg: vec3<u32>) -> u32 {
    return wg.y * P.groups_x + wg.x;
}

// y = x - anchor[assigned] in the padded layout: when d is not a multiple of nsub, the first
// d % nsub sub-spaces hold dsub columns and the others dsub - 1 and a zero
// (quant::source_column). Without anchors, y is x padded: how search pads its queries.
@compute @workgroup_size(WG)
fn residuals(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = linear(wg) * WG + lid.x;
    if (e >= P.n * P.dp) {
        return;
    }
    let i = e / P.dp;
    let p = e % P.dp;
    let nsub = P.dp / P.dsub;
    let q = P.d / nsub;
    let rem = P.d % nsub;
    let j = p / P.dsub;
    let o = p % P.dsub;
    var t = p;
    if (j >= rem) {
        if (o >= q) {
            y[e] = 0.0;
            return;
        }
        t = rem * P.dsub + (j - rem) * q + o;
    }
    var v = x[i * P.d + t];
    if (P.has_anchors != 0u) {
        v -= anchors[assigned[i] * P.d + t];
    }
    y[e] = v;
}

// Nearest codeword of each (row, sub-space): workgroups (tiles of 2 x WG rows, nsub). The
// sub-codebook (zero-padded to D4 x 4 floats per codeword) and its squared norms sit in
// workgroup memory; each thread holds two rows' sub-vectors in registers, WG apart, so every
// codeword read feeds two rows (kept as two named arrays: arrays of rows indexed in loops
// fall out of registers). Score |c|^2 - 2 y.c, first minimum on ties.
fn load_sub(i: u32, j: u32) -> array<vec4<f32>, D4> {
    var v: array<vec4<f32>, D4>;
    if (i < P.n) {
        let row = i * P.dp + j * P.dsub;
        for (var q = 0u; q < D4; q++) {
            for (var u = 0u; u < 4u; u++) {
                if (4u * q + u < P.dsub) {
                    v[q][u] = y[row + 4u * q + u];
                }
            }
        }
    }
    return v;
}

@compute @workgroup_size(WG)
fn pq_assign(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = wg.y;
    let base = j * P.ksub * P.dsub;
    for (var e = lid.x; e < P.ksub * D4; e += WG) {
        let c = e / D4;
        let t = (e % D4) * 4u;
        var w = vec4<f32>();
        for (var u = 0u; u < 4u; u++) {
            if (t + u < P.dsub) {
                w[u] = books[base + c * P.dsub + t + u];
            }
        }
        cb[e] = w;
    }
    workgroupBarrier();
    for (var c = lid.x; c < P.ksub; c += WG) {
        var s = 0.0;
        for (var q = 0u; q < D4; q++) {
            s += dot(cb[c * D4 + q], cb[c * D4 + q]);
        }
        cn[c] = s;
    }
    workgroupBarrier();
    let i0 = wg.x * 2u * WG + lid.x;
    let i1 = i0 + WG;
    if (i0 >= P.n) {
        return;
    }
    let v0 = load_sub(i0, j);
    let v1 = load_sub(i1, j);
    var best0 = INF;
    var best1 = INF;
    var at0 = 0u;
    var at1 = 0u;
    for (var c = 0u; c < P.ksub; c++) {
        var d0 = 0.0;
        var d1 = 0.0;
        for (var q = 0u; q < D4; q++) {
            let w = cb[c * D4 + q];
            d0 += dot(v0[q], w);
            d1 += dot(v1[q], w);
        }
        let s0 = cn[c] - 2.0 * d0;
        let s1 = cn[c] - 2.0 * d1;
        if (s0 < best0) {
            best0 = s0;
            at0 = c;
        }
        if (s1 < best1) {
            best1 = s1;
            at1 = c;
        }
    }
    idx[i0 * P.nsub + j] = at0;
    if (i1 < P.n) {
        idx[i1 * P.nsub + j] = at1;
    }
}

// Four indices per word, little-endian: the n x nsub bytes of the codes' indices.
@compute @workgroup_size(WG)
fn pack(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let w = linear(wg) * WG + lid.x;
    let total = P.n * P.nsub;
    if (w * 4u >= total) {
        return;
    }
    var word = 0u;
    for (var b = 0u; b < 4u; b++) {
        if (w * 4u + b < total) {
            word |= (idx[w * 4u + b] & 255u) << (8u * b);
        }
    }
    packed[w] = word;
}

// The error level of each row's code: idx holds rows of P.nsub indices, the dp / dsub
// sub-codes (from pq_assign) then the level, written here: the level of `levels` (ascending)
// nearest to the squared error of the sub-codes for the row of y, summed sub-space by
// sub-space in column order (as the host's `host::error_level`); the lower of two at a tie.
@compute @workgroup_size(WG)
fn error_levels(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear(wg) * WG + lid.x;
    if (i >= P.n) {
        return;
    }
    let m = P.dp / P.dsub;
    var e = 0.0;
    for (var j = 0u; j < m; j++) {
        let w = (j * P.ksub + idx[i * P.nsub + j]) * P.dsub;
        var s = 0.0;
        for (var t = 0u; t < P.dsub; t++) {
            let diff = y[i * P.dp + j * P.dsub + t] - books[w + t];
            s += diff * diff;
        }
        e += s;
    }
    let nl = arrayLength(&levels);
    var lo = 0u;
    var hi = nl;
    while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (levels[mid] < e) {
            lo = mid + 1u;
        } else {
            hi = mid;
        }
    }
    var pick = lo;
    if (lo == nl) {
        pick = nl - 1u;
    } else if (lo > 0u && e - levels[lo - 1u] <= levels[lo] - e) {
        pick = lo - 1u;
    }
    idx[i * P.nsub + m] = pick;
}
