// k-means steps of the WGPU backend besides the assignment (dots.wgsl): norms, counts and
// energy, the counting sort of points by centroid, each centroid's trim cutoff (radix select
// on the distance bits), and the trimmed means. Only O(k) values go back to the host.

struct Params {
    n: u32,        // points (or rows for row_norms, centroids x d for finalize)
    d: u32,
    k: u32,
    row0: u32,     // first row of the bound block of points
    rows: u32,     // rows in that block
    first: u32,    // update_sums: the first block overwrites the sums
    use_bias: u32,
    groups_x: u32, // workgroups along x, for grids folded into two dimensions
    _p3: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> norms: array<f32>;
@group(0) @binding(3) var<storage, read> assigned: array<u32>;
@group(0) @binding(4) var<storage, read> dist: array<f32>;
@group(0) @binding(5) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> partial: array<f32>;
@group(0) @binding(7) var<storage, read_write> cursor: array<atomic<u32>>;
@group(0) @binding(8) var<storage, read_write> order: array<u32>;
@group(0) @binding(9) var<storage, read> start: array<u32>;
@group(0) @binding(10) var<storage, read_write> cut: array<u32>;
@group(0) @binding(11) var<storage, read_write> kept: array<u32>;
@group(0) @binding(12) var<storage, read_write> spread: array<f32>;
@group(0) @binding(13) var<storage, read_write> sums: array<f32>;
@group(0) @binding(14) var<storage, read_write> cent: array<f32>;
@group(0) @binding(15) var<storage, read> bias: array<f32>;
@group(0) @binding(16) var<storage, read> cnorm: array<f32>;
@group(0) @binding(17) var<storage, read_write> start_out: array<u32>;
// update_cut: the fraction of farthest members dropped. Not a parameter: it changes every
// iteration while the parameters' bind group is made once.
@group(0) @binding(18) var<storage, read> trim: array<f32>;

// Threads per workgroup: set from the adapter's limits when the pipelines are built.
const WG: u32 = 256u;

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_u: array<u32, WG>;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> pick: array<u32, 2>;
// count_energy: the workgroup's own counts, added to the global ones once at the end, where k
// fits (a million points on a few thousand global counters queue up on each).
const TALLY: u32 = 2048u;
var<workgroup> tally: array<atomic<u32>, TALLY>;

fn linear(wg: vec3<u32>) -> u32 {
    return wg.y * P.groups_x + wg.x;
}

// Squared norm of each row of the bound block into norms[row0 + i].
@compute @workgroup_size(WG)
fn row_norms(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear(wg) * WG + lid.x;
    if (i >= P.rows) {
        return;
    }
    var s = 0.0;
    for (var t = 0u; t < P.d; t++) {
        let v = x[i * P.d + t];
        s += v * v;
    }
    norms[P.row0 + i] = s;
}

// Before an assignment: its offsets off[j] = |c_j|^2 (+ bias[j]), written into norms, and
// the counts zeroed for count_energy.
@compute @workgroup_size(WG)
fn offsets(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = linear(wg) * WG + lid.x;
    if (j < P.k) {
        var o = cnorm[j];
        if (P.use_bias != 0u) {
            o += bias[j];
        }
        norms[j] = o;
        atomicStore(&counts[j], 0u);
    }
}

// Each group's place in the members' order, from the counts on the device: start[j] is the
// sum of the counts before j (start[k] = n), and the scatter's cursor starts there. One
// workgroup: each thread sums its own run of counts, a scan over the threads places the runs.
@compute @workgroup_size(WG)
fn group_starts(@builtin(local_invocation_id) lid: vec3<u32>) {
    let per = (P.k + WG - 1u) / WG;
    let b = min(lid.x * per, P.k);
    let e = min(b + per, P.k);
    var s = 0u;
    for (var j = b; j < e; j++) {
        s += atomicLoad(&counts[j]);
    }
    red_u[lid.x] = s;
    workgroupBarrier();
    for (var o = 1u; o < WG; o <<= 1u) {
        var v = 0u;
        if (lid.x >= o) {
            v = red_u[lid.x - o];
        }
        workgroupBarrier();
        red_u[lid.x] += v;
        workgroupBarrier();
    }
    var at = red_u[lid.x] - s;
    for (var j = b; j < e; j++) {
        start_out[j] = at;
        atomicStore(&cursor[j], at);
        at += atomicLoad(&counts[j]);
    }
    if (lid.x == WG - 1u) {
        start_out[P.k] = red_u[WG - 1u];
    }
}

fn sum_f(v: f32, tid: u32) -> f32 {
    red_f[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red_f[tid] += red_f[tid + s];
        }
        workgroupBarrier();
    }
    let t = red_f[0];
    workgroupBarrier();
    return t;
}

fn sum_u(v: u32, tid: u32) -> u32 {
    red_u[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red_u[tid] += red_u[tid + s];
        }
        workgroupBarrier();
    }
    let t = red_u[0];
    workgroupBarrier();
    return t;
}

// Points per centroid, and per workgroup the sum of its points' distances (a fixed grid and a
// fixed order, so the energy repeats exactly).
@compute @workgroup_size(WG)
fn count_energy(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
    let local = P.k <= TALLY;
    if (local) {
        for (var j = lid.x; j < P.k; j += WG) {
            atomicStore(&tally[j], 0u);
        }
        workgroupBarrier();
    }
    var s = 0.0;
    for (var i = wg.x * WG + lid.x; i < P.n; i += nwg.x * WG) {
        if (local) {
            atomicAdd(&tally[assigned[i]], 1u);
        } else {
            atomicAdd(&counts[assigned[i]], 1u);
        }
        s += dist[i];
    }
    let t = sum_f(s, lid.x); // its barriers also end the tally
    if (lid.x == 0u) {
        partial[wg.x] = t;
    }
    if (local) {
        for (var j = lid.x; j < P.k; j += WG) {
            let c = atomicLoad(&tally[j]);
            if (c > 0u) {
                atomicAdd(&counts[j], c);
            }
        }
    }
}

// Counting sort of point indices by centroid: cursor starts at each group's offset.
@compute @workgroup_size(WG)
fn scatter(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = linear(wg) * WG + lid.x;
    if (i < P.n) {
        order[atomicAdd(&cursor[assigned[i]], 1u)] = i;
    }
}

// One workgroup per centroid j over its members order[start[j] .. start[j+1]]: the trim
// cutoff (the keep-th smallest distance, keep = count - floor(count * trim), by a radix select
// over the bits of non-negative floats, whose order is that of the bits), how many points are
// kept and their mean distance (the spread).
@compute @workgroup_size(WG)
fn update_cut(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = linear(wg);
    if (j >= P.k) {
        return;
    }
    let tid = lid.x;
    let b = start[j];
    let e = start[j + 1u];
    let count = e - b;
    let drop = u32(floor(f32(count) * trim[0]));
    var c = 0xffffffffu;
    if (drop > 0u) {
        var keep = count - drop;
        var prefix = 0u;
        for (var shift = 24i; shift >= 0i; shift -= 8i) {
            for (var t = tid; t < 256u; t += WG) {
                atomicStore(&hist[t], 0u);
            }
            workgroupBarrier();
            var hi_mask = 0u;
            if (shift < 24i) {
                hi_mask = 0xffffffffu << u32(shift + 8i);
            }
            for (var p = b + tid; p < e; p += WG) {
                let v = bitcast<u32>(dist[order[p]]);
                if ((v & hi_mask) == prefix) {
                    atomicAdd(&hist[(v >> u32(shift)) & 255u], 1u);
                }
            }
            workgroupBarrier();
            if (tid == 0u) {
                var acc = 0u;
                var dg = 0u;
                for (; dg < 255u; dg++) {
                    let h = atomicLoad(&hist[dg]);
                    if (acc + h >= keep) {
                        break;
                    }
                    acc += h;
                }
                pick[0] = dg;
                pick[1] = keep - acc;
            }
            workgroupBarrier();
            prefix |= pick[0] << u32(shift);
            keep = pick[1];
            workgroupBarrier();
        }
        c = prefix;
    }
    var nk = 0u;
    var s = 0.0;
    for (var p = b + tid; p < e; p += WG) {
        let v = dist[order[p]];
        if (bitcast<u32>(v) <= c) {
            nk += 1u;
            s += v;
        }
    }
    nk = sum_u(nk, tid);
    s = sum_f(s, tid);
    if (tid == 0u) {
        cut[j] = c;
        kept[j] = nk;
        spread[j] = select(0.0, s / f32(nk), nk > 0u);
    }
}

// One workgroup per centroid: the sum of its kept members that lie in the bound block of
// points (rows row0 .. row0 + rows), added to (or, for the first block, written over) sums.
// Threads take dimensions, so each member row is read whole; when d is below the workgroup
// size, `groups` sets of threads take members in turn and their sums meet in workgroup memory.
@compute @workgroup_size(WG)
fn update_sums(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let j = linear(wg);
    if (j >= P.k) {
        return;
    }
    let b = start[j];
    let e = start[j + 1u];
    let c = cut[j];
    let dw = min(P.d, WG);
    let groups = WG / dw;
    let g = lid.x / dw;
    let u = lid.x % dw;
    for (var t0 = 0u; t0 < P.d; t0 += dw) {
        let t = t0 + u;
        var acc = 0.0;
        if (g < groups && t < P.d) {
            for (var p = b + g; p < e; p += groups) {
                let i = order[p];
                if (i >= P.row0 && i - P.row0 < P.rows && bitcast<u32>(dist[i]) <= c) {
                    acc += x[(i - P.row0) * P.d + t];
                }
            }
        }
        red_f[lid.x] = acc;
        workgroupBarrier();
        if (g == 0u && t < P.d) {
            var total = 0.0;
            for (var h = 0u; h < groups; h++) {
                total += red_f[h * dw + u];
            }
            if (P.first != 0u) {
                sums[j * P.d + t] = total;
            } else {
                sums[j * P.d + t] += total;
            }
        }
        workgroupBarrier();
    }
}

// Centroids with kept points become the mean of those points; the others stay.
@compute @workgroup_size(WG)
fn finalize(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let e = linear(wg) * WG + lid.x;
    if (e >= P.k * P.d) {
        return;
    }
    let nk = kept[e / P.d];
    if (nk > 0u) {
        cent[e] = sums[e] / f32(nk);
    }
}
