// Index search on the WGPU backend. Lists live on the device back to back (codes as bytes
// packed four to a word, ids as two words, start offsets) with, under L2, each vector's part
// of its distance that does not depend on the query (sum over sub-spaces of |c|^2 + 2 a.c,
// computed once when the lists are uploaded). A query's table is then the same for every list
// it probes: one workgroup per query fills it once and scans all its probes. Coarse dot
// products come from dots.wgsl.

struct Params {
    nq: u32,      // queries in this batch
    d: u32,
    m: u32,       // lists
    l2: u32,
    nprobe: u32,
    nsub: u32,
    dsub: u32,
    want: u32,    // candidates kept per query
    dp: u32,
    ksub: u32,    // codewords per sub-quantizer: 256 (8-bit codes) or 16 (4-bit)
    filtered: u32, // 1: only positions set in `allow` are candidates
    _p2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> scores: array<f32>;
@group(0) @binding(3) var<storage, read> anorm: array<f32>;
@group(0) @binding(4) var<storage, read_write> probes: array<u32>;
@group(0) @binding(5) var<storage, read_write> base: array<f32>;
@group(0) @binding(6) var<storage, read> books: array<f32>;
@group(0) @binding(7) var<storage, read_write> qt: array<f32>;
@group(0) @binding(8) var<storage, read> codes: array<u32>;
@group(0) @binding(9) var<storage, read> start: array<u32>;
@group(0) @binding(10) var<storage, read> vterm: array<f32>;
@group(0) @binding(13) var<storage, read> ids: array<vec2<u32>>;
@group(0) @binding(14) var<storage, read_write> out_id: array<vec2<u32>>;
@group(0) @binding(15) var<storage, read_write> out_d: array<f32>;
// The query tables again, four floats at a time, for the scan's table fill.
@group(0) @binding(16) var<storage, read> qt4: array<vec4<f32>>;
// With P.filtered, bit i % 32 of word i / 32 allows the vector at position i of the lists.
@group(0) @binding(17) var<storage, read> allow: array<u32>;

// Threads per workgroup, the table size (nsub x ksub), whether the table is staged in
// workgroup memory (1) or read from the query tables in storage (0, when it does not fit; LUT
// is then a token size) and the candidates kept per thread: set when the pipelines are built
// (the last three per index shape).
const WG: u32 = 128u;
const LUT: u32 = 8192u;
const STAGED: u32 = 1u;
const WANT: u32 = 128u;
const INF: f32 = 3.40282347e38;
const NONE: u32 = 0xffffffffu;

var<workgroup> red_v: array<f32, WG>;
var<workgroup> red_p: array<u32, WG>;
var<workgroup> red_t: array<u32, WG>;
var<workgroup> lut: array<f32, LUT>;
var<workgroup> top_d: array<f32, WANT>;
var<workgroup> top_p: array<u32, WANT>;

// Entry e of query qi's table, from workgroup memory or from storage (the same value).
fn entry(qi: u32, e: u32) -> f32 {
    if (STAGED != 0u) {
        return lut[e];
    }
    let f = qi * P.nsub * P.ksub + e;
    return qt4[f >> 2u][f & 3u];
}

// Workgroup argmin of (v, p) (ties to the smaller p); every thread gets the winner, its
// position and the thread that offered it.
fn argmin(v: f32, p: u32, tid: u32) -> vec3<u32> {
    red_v[tid] = v;
    red_p[tid] = p;
    red_t[tid] = tid;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            let ov = red_v[tid + s];
            let op = red_p[tid + s];
            if (ov < red_v[tid] || (ov == red_v[tid] && op < red_p[tid])) {
                red_v[tid] = ov;
                red_p[tid] = op;
                red_t[tid] = red_t[tid + s];
            }
        }
        workgroupBarrier();
    }
    let r = vec3<u32>(bitcast<u32>(red_v[0]), red_p[0], red_t[0]);
    workgroupBarrier();
    return r;
}

// Per query (one workgroup): coarse scores from the dot products (L2: |q|^2 + |a|^2 - 2 q.a;
// inner product: -q.a) written over them, then the nprobe best lists in order.
@compute @workgroup_size(WG)
fn coarse_probe(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let qi = wg.x;
    let tid = lid.x;
    var qn = 0.0;
    for (var t = tid; t < P.d; t += WG) {
        let v = q[qi * P.d + t];
        qn += v * v;
    }
    red_v[tid] = qn;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red_v[tid] += red_v[tid + s];
        }
        workgroupBarrier();
    }
    qn = red_v[0];
    workgroupBarrier();
    let row = qi * P.m;
    for (var j = tid; j < P.m; j += WG) {
        let dq = scores[row + j];
        scores[row + j] = select(-dq, qn + anorm[j] - 2.0 * dq, P.l2 != 0u);
    }
    storageBarrier();
    for (var p = 0u; p < P.nprobe; p++) {
        var best = INF;
        var at = NONE;
        for (var j = tid; j < P.m; j += WG) {
            let v = scores[row + j];
            if (v < best) {
                best = v;
                at = j;
            }
        }
        let w = argmin(best, at, tid);
        var a = w.y;
        if (a == NONE) {
            a = 0u; // fewer lists than probes: repeats are skipped by the scan
        }
        if (tid == 0u) {
            probes[qi * P.nprobe + p] = a;
            base[qi * P.nprobe + p] = bitcast<f32>(w.x);
            scores[row + a] = INF;
        }
        storageBarrier();
    }
}

// Per (query, sub-space): scale * <y_j, c> for every codeword (scale -2 for L2, -1 for inner
// product), one thread per codeword.
@compute @workgroup_size(WG)
fn query_tables(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let qi = wg.x;
    let j = wg.y;
    let scale = select(-1.0, -2.0, P.l2 != 0u);
    for (var c = lid.x; c < P.ksub; c += WG) {
        var s = 0.0;
        for (var t = 0u; t < P.dsub; t++) {
            s += q[qi * P.dp + j * P.dsub + t] * books[(j * P.ksub + c) * P.dsub + t];
        }
        qt[(qi * P.nsub + j) * P.ksub + c] = scale * s;
    }
}

// Keeps the `want` smallest (distance, position) pairs seen, sorted.
fn offer(kd: ptr<function, array<f32, WANT>>, kp: ptr<function, array<u32, WANT>>, v: f32, p: u32) {
    if (!(v < (*kd)[P.want - 1u])) {
        return;
    }
    var i = P.want - 1u;
    while (i > 0u && (*kd)[i - 1u] > v) {
        (*kd)[i] = (*kd)[i - 1u];
        (*kp)[i] = (*kp)[i - 1u];
        i--;
    }
    (*kd)[i] = v;
    (*kp)[i] = p;
}

// The workgroup's `want` best of every thread's sorted candidates into top_d / top_p:
// `want` rounds of a workgroup argmin over the threads' heads.
fn block_top(kd: ptr<function, array<f32, WANT>>, kp: ptr<function, array<u32, WANT>>, tid: u32) {
    var head = 0u;
    for (var r = 0u; r < P.want; r++) {
        var v = INF;
        var p = NONE;
        if (head < P.want) {
            v = (*kd)[head];
            p = (*kp)[head];
        }
        let w = argmin(v, p, tid);
        if (tid == 0u) {
            top_d[r] = bitcast<f32>(w.x);
            top_p[r] = w.y;
        }
        if (tid == w.z) {
            head++;
        }
    }
    workgroupBarrier();
}

// One workgroup per query: its table in workgroup memory (or read from storage), a scan of the codes of every list it
// probes (8-bit: a byte per sub-code; 4-bit: two per byte, low nibble first), and
// its `want` best as ids (two words, little-endian; none = all ones) and distances.
@compute @workgroup_size(WG)
fn scan_lists(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let qi = wg.x;
    let tid = lid.x;
    let n4 = P.nsub * P.ksub / 4u * STAGED;
    for (var e = tid; e < n4; e += WG) {
        let v = qt4[qi * n4 + e];
        lut[4u * e] = v.x;
        lut[4u * e + 1u] = v.y;
        lut[4u * e + 2u] = v.z;
        lut[4u * e + 3u] = v.w;
    }
    workgroupBarrier();
    var kd: array<f32, WANT>;
    var kp: array<u32, WANT>;
    for (var r = 0u; r < P.want; r++) {
        kd[r] = INF;
        kp[r] = NONE;
    }
    for (var p = 0u; p < P.nprobe; p++) {
        let a = probes[qi * P.nprobe + p];
        // A list probed twice (fewer lists than probes) is scanned once.
        var repeat = false;
        for (var o = 0u; o < p; o++) {
            repeat = repeat || probes[qi * P.nprobe + o] == a;
        }
        if (repeat) {
            continue;
        }
        let b0 = base[qi * P.nprobe + p];
        let s1 = start[a + 1u];
        for (var i = start[a] + tid; i < s1; i += WG) {
            if (P.filtered != 0u && ((allow[i >> 5u] >> (i & 31u)) & 1u) == 0u) {
                continue;
            }
            var v = b0;
            if (P.l2 != 0u) {
                v += vterm[i];
            }
            if (P.ksub == 16u) {
                // An odd count of sub-codes leaves a last byte whose high nibble (an error
                // level, already in the vector's term) is not read.
                let nb = P.nsub / 2u;
                let c0 = i * ((P.nsub + 1u) / 2u);
                for (var j = 0u; j < nb; j++) {
                    let byte = c0 + j;
                    let code = (codes[byte >> 2u] >> ((byte & 3u) * 8u)) & 255u;
                    v += entry(qi, j * 32u + (code & 15u));
                    v += entry(qi, j * 32u + 16u + (code >> 4u));
                }
                if (P.nsub % 2u == 1u) {
                    let byte = c0 + nb;
                    let code = (codes[byte >> 2u] >> ((byte & 3u) * 8u)) & 15u;
                    v += entry(qi, nb * 32u + code);
                }
                offer(&kd, &kp, v, i);
                continue;
            }
            let c0 = i * P.nsub;
            if (P.nsub % 4u == 0u) {
                // Whole words: four sub-codes per load.
                for (var w = 0u; w < P.nsub / 4u; w++) {
                    let word = codes[c0 / 4u + w];
                    let t = w * 1024u;
                    v += entry(qi, t + (word & 255u));
                    v += entry(qi, t + 256u + ((word >> 8u) & 255u));
                    v += entry(qi, t + 512u + ((word >> 16u) & 255u));
                    v += entry(qi, t + 768u + (word >> 24u));
                }
            } else {
                for (var j = 0u; j < P.nsub; j++) {
                    let byte = c0 + j;
                    let code = (codes[byte >> 2u] >> ((byte & 3u) * 8u)) & 255u;
                    v += entry(qi, j * 256u + code);
                }
            }
            offer(&kd, &kp, v, i);
        }
    }
    block_top(&kd, &kp, tid);
    for (var r = tid; r < P.want; r += WG) {
        let pos = top_p[r];
        out_d[qi * P.want + r] = top_d[r];
        var id = vec2<u32>(NONE, NONE);
        if (pos != NONE) {
            id = ids[pos];
        }
        out_id[qi * P.want + r] = id;
    }
}
