// Row-by-row dot products tiled through workgroup memory: the GEMM of the WGPU backend.
// `dots` writes C = A B^T (m x n). `assign` keeps, for each row i of A, the column j
// minimizing off[j] - 2 a_i.b_j (off = |b_j|^2 + bias_j), first on ties, without writing C:
// the k-means and nearest-anchor assignment.
//
// A workgroup of 16 x 16 threads owns a 64-row tile of A; each thread accumulates a 4 x 4
// block of dot products while 16-wide slices of A and B pass through workgroup memory.

struct Params {
    m: u32,        // rows of A in this dispatch
    n: u32,        // rows of B
    k: u32,        // shared dimension
    row0: u32,     // first row of this block of A in the per-row outputs (assign)
    use_bias: u32, // assign: subtract bias[j] back out of the reported distance
    groups_x: u32, // workgroups along x, for grids folded into two dimensions
    _p0: u32,
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

const T: u32 = 64u;
const TK: u32 = 16u;
// The largest float: above any real score (WGSL has no infinity literal).
const INF: f32 = 3.40282347e38;
const NONE: u32 = 0xffffffffu;

// Slices of A and B: element (t, r) of the 16 x 64 slice at [t * 16 + r / 4][r % 4].
var<workgroup> sa: array<vec4<f32>, 256>;
var<workgroup> sb: array<vec4<f32>, 256>;
// assign: each thread's best per row, merged across the 16 threads sharing the rows.
var<workgroup> best_v: array<f32, 1024>;
var<workgroup> best_i: array<u32, 1024>;

// acc[r][c] = a_(i0 + ty*4 + r) . b_(j0 + tx*4 + c).
fn tile(i0: u32, j0: u32, lid: vec3<u32>) -> array<vec4<f32>, 4> {
    var acc: array<vec4<f32>, 4>;
    let tid = lid.y * 16u + lid.x;
    for (var t0 = 0u; t0 < P.k; t0 += TK) {
        for (var e = tid; e < T * TK; e += 256u) {
            let r = e / TK;
            let t = e % TK;
            let gt = t0 + t;
            var va = 0.0;
            if (i0 + r < P.m && gt < P.k) {
                va = xa[(i0 + r) * P.k + gt];
            }
            var vb = 0.0;
            if (j0 + r < P.n && gt < P.k) {
                vb = xb[(j0 + r) * P.k + gt];
            }
            sa[t * 16u + r / 4u][r % 4u] = va;
            sb[t * 16u + r / 4u][r % 4u] = vb;
        }
        workgroupBarrier();
        for (var t = 0u; t < TK; t++) {
            let a = sa[t * 16u + lid.y];
            let b = sb[t * 16u + lid.x];
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        workgroupBarrier();
    }
    return acc;
}

@compute @workgroup_size(16, 16)
fn dots(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i0 = wg.y * T;
    let j0 = wg.x * T;
    let acc = tile(i0, j0, lid);
    for (var r = 0u; r < 4u; r++) {
        let i = i0 + lid.y * 4u + r;
        for (var c = 0u; c < 4u; c++) {
            let j = j0 + lid.x * 4u + c;
            if (i < P.m && j < P.n) {
                out[i * P.n + j] = acc[r][c];
            }
        }
    }
}

@compute @workgroup_size(16, 16)
fn assign(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i0 = (wg.y * P.groups_x + wg.x) * T;
    if (i0 >= P.m) {
        return;
    }
    var best = array<f32, 4>(INF, INF, INF, INF);
    var at = array<u32, 4>(NONE, NONE, NONE, NONE);
    for (var j0 = 0u; j0 < P.n; j0 += T) {
        let acc = tile(i0, j0, lid);
        // Columns rise within a thread, so a strict < keeps the first minimum.
        for (var c = 0u; c < 4u; c++) {
            let j = j0 + lid.x * 4u + c;
            if (j < P.n) {
                let o = off[j];
                for (var r = 0u; r < 4u; r++) {
                    let s = o - 2.0 * acc[r][c];
                    if (s < best[r]) {
                        best[r] = s;
                        at[r] = j;
                    }
                }
            }
        }
    }
    for (var r = 0u; r < 4u; r++) {
        best_v[(lid.y * 4u + r) * 16u + lid.x] = best[r];
        best_i[(lid.y * 4u + r) * 16u + lid.x] = at[r];
    }
    workgroupBarrier();
    let row = lid.y * 16u + lid.x;
    if (row < T && i0 + row < P.m) {
        var v = INF;
        var a = NONE;
        for (var t = 0u; t < 16u; t++) {
            let ov = best_v[row * 16u + t];
            let oa = best_i[row * 16u + t];
            if (ov < v || (ov == v && oa < a)) {
                v = ov;
                a = oa;
            }
        }
        if (a == NONE) {
            a = 0u; // every score was infinite or NaN
        }
        let g = P.row0 + i0 + row;
        var dv = an[g] + v;
        if (P.use_bias != 0u) {
            dv -= bias[a];
        }
        assigned[g] = a;
        dist[g] = max(dv, 0.0);
    }
}
