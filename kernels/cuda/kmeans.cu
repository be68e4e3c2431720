// k-means steps on the device: the CUDA side of `backend::cuda`.
//
// Header-free on purpose (NVRTC 13 ships no standard headers). Distances come from a cuBLAS
// GEMM (dots = X C^T); these kernels turn dots into assignments, find each centroid's trim
// cutoff by a radix select on the distance bits, and reduce the kept points into new centroids.
// Every launch stays on the device; only O(k) statistics go back to the host.

#define FULL 0xffffffffu

// x . c in fp32, the whole warp on one pair (every lane gets the sum).
__device__ float warp_dot(const float* __restrict__ a, const float* __restrict__ b, int d,
                          int lane) {
    float s = 0.f;
    for (int t = lane; t < d; t += 32) s += a[t] * b[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
    return s;
}

// Squared norm of each row: one warp per row.
extern "C" __global__ void row_norms(const float* __restrict__ x, int n, int d,
                                     float* __restrict__ out) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const float* r = x + (size_t)row * d;
    float s = warp_dot(r, r, d, lane);
    if (lane == 0) out[row] = s;
}

// fp16 conversions by PTX (NVRTC here has no headers): round to nearest, and back (exact).
__device__ unsigned short f16_rn(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
__device__ float f16_value(unsigned short h) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h));
    return v;
}

// Each row v of x (rows x d) scaled by 2^s, a power of two that puts its largest magnitude in
// [2^14, 2^15) (s within [-126, 126]), then written as three fp16 pieces side by side (rows x
// 3d), so that one fp16 GEMM of a point row [hi, hi, lo] with a centroid row [hi, lo, hi]
// sums hi.hi + hi.lo + lo.hi: (2^s x).(2^t c) to within 3.01 * 2^-22 |x| |c| 2^(s+t) (the
// "3xFP16" split; the scale keeps both pieces of every value that matters clear of fp16's
// range limits), at twice TF32's tensor-core rate. unscale[row] = 2^-s undoes the scale.
// One warp per row.
extern "C" __global__ void split_f16(const float* __restrict__ x, int rows, int d,
                                     int centroids, unsigned short* __restrict__ out,
                                     float* __restrict__ unscale) {
    const int lane = threadIdx.x & 31;
    for (int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
         r += gridDim.x * (blockDim.x >> 5)) {
        const float* v = x + (size_t)r * d;
        float m = 0.f;
        for (int t = lane; t < d; t += 32) m = fmaxf(m, fabsf(v[t]));
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(FULL, m, o));
        // m in [2^(e-127), 2^(e-126)) for its biased exponent e (0 for zero or subnormal).
        const int e = (__float_as_int(m) >> 23) & 0xff;
        const int s = min(max(141 - e, -126), 126);
        const float up = __int_as_float((127 + s) << 23);
        unsigned short* o = out + (size_t)r * 3 * d;
        for (int t = lane; t < d; t += 32) {
            const float y = v[t] * up;
            const unsigned short hi = f16_rn(y), lo = f16_rn(y - f16_value(hi));
            o[t] = hi;
            o[d + t] = centroids ? lo : hi;
            o[2 * d + t] = centroids ? hi : lo;
        }
        if (lane == 0) unscale[r] = __int_as_float((127 - s) << 23);
    }
}

// offset[j] = |c_j|^2 + bias[j]: what the argmin adds to -2 x.c.
extern "C" __global__ void offsets(const float* __restrict__ cn, const float* __restrict__ bias,
                                   int use_bias, int k, float* __restrict__ off) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < k) off[j] = cn[j] + (use_bias ? bias[j] : 0.f);
}

// For `rows` rows of dots (row-major, k columns) starting at global row `row0`: the column
// minimizing off[j] - 2 dot (first on ties) and the squared distance without the bias.
// One warp per row; each lane keeps its own first minimum, then the warp merges by (value, index).
//
// slack > 0 marks the dots as approximate (TF32 or 3xFP16), each within slack/2 |x| |c_j| of
// x . c_j. Scaled dots (3xFP16) are first multiplied by the point's and the centroid's
// unscale, xu[row] and cu[j]: powers of two, so exactly.
// Then every column whose score could still beat the winner's within those bounds is scored
// again from x and c in fp32, and the best of those wins: the assignment and distance an
// fp32 GEMM would give, at TF32 speed whenever few columns are that close.
extern "C" __global__ void argmin_rows(const float* __restrict__ dots, int rows, int k,
                                       const float* __restrict__ off,
                                       const float* __restrict__ bias, int use_bias,
                                       const float* __restrict__ xn, int row0,
                                       unsigned* __restrict__ assign, float* __restrict__ dist,
                                       const float* __restrict__ x,
                                       const float* __restrict__ c,
                                       const float* __restrict__ cn, int d, float slack,
                                       int scaled, const float* __restrict__ xu,
                                       const float* __restrict__ cu) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float* s = dots + (size_t)r * k;
    const float u = scaled ? xu[row0 + r] : 1.f;
    // The score of column j from its dot.
#define SCORE(j) (off[j] - 2.f * (scaled ? s[j] * cu[j] * u : s[j]))
    float best = __int_as_float(0x7f800000), second = best, cmax = 0.f;
    int at = 0x7fffffff;
    for (int j = lane; j < k; j += 32) {
        float v = SCORE(j);
        if (v < best) { second = best; best = v; at = j; }
        else if (v < second) second = v;
        if (slack > 0.f) cmax = fmaxf(cmax, cn[j]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(FULL, best, o);
        int oa = __shfl_xor_sync(FULL, at, o);
        float os = __shfl_xor_sync(FULL, second, o);
        cmax = fmaxf(cmax, __shfl_xor_sync(FULL, cmax, o));
        if (ob < best || (ob == best && oa < at)) {
            second = fminf(best, os);
            best = ob;
            at = oa;
        } else {
            second = fminf(second, ob);
        }
    }
    if (at == 0x7fffffff) at = 0;  // every score was infinite or NaN
    int g = row0 + r;
    if (slack > 0.f) {
        // The winner's score again in fp32 (its distance is the energy and the trim's input).
        const float* xr = x + (size_t)g * d;
        float eb = off[at] - 2.f * warp_dot(xr, c + (size_t)at * d, d, lane);
        int ea = at;
        // True score of the winner <= hi < true score of any column outside the candidates;
        // when the runner-up, even at the largest anchor's error bound, is past hi, none are.
        const float xl = sqrtf(xn[g]);
        const float hi = best + slack * xl * sqrtf(cn[at]);
        const bool close = second - slack * xl * sqrtf(cmax) <= hi;
        for (int j0 = 0; close && j0 < k; j0 += 32) {
            int j = j0 + lane;
            bool near = j < k && j != at && SCORE(j) - slack * xl * sqrtf(cn[j]) <= hi;
            for (unsigned m = __ballot_sync(FULL, near); m; m &= m - 1) {
                int jj = j0 + __ffs(m) - 1;
                float v = off[jj] - 2.f * warp_dot(xr, c + (size_t)jj * d, d, lane);
                if (v < eb || (v == eb && jj < ea)) { eb = v; ea = jj; }
            }
        }
        best = eb;
        at = ea;
    }
    if (lane == 0) {
        float v = xn[g] + best - (use_bias ? bias[at] : 0.f);
        assign[g] = (unsigned)at;
        dist[g] = v > 0.f ? v : 0.f;
    }
}
#undef SCORE

// Points per centroid and the total distance (one double atomic per block).
extern "C" __global__ void count_energy(const unsigned* __restrict__ assign,
                                        const float* __restrict__ dist, int n,
                                        unsigned* __restrict__ counts,
                                        double* __restrict__ energy) {
    __shared__ double part[32];
    double s = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&counts[assign[i]], 1u);
        s += (double)dist[i];
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
        if (threadIdx.x == 0) atomicAdd(energy, s);
    }
}

// Counting sort of point indices by centroid: cursor starts at each group's offset. Each
// member's distance is written beside its index, so the update reads both in group order
// instead of gathering the distances.
extern "C" __global__ void scatter(const unsigned* __restrict__ assign,
                                   const float* __restrict__ dist, int n,
                                   unsigned* __restrict__ cursor, unsigned* __restrict__ order,
                                   float* __restrict__ mdist) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned p = atomicAdd(&cursor[assign[i]], 1u);
        order[p] = (unsigned)i;
        mdist[p] = dist[i];
    }
}

// Block-wide sum, returned to every thread. `sh` holds one slot per warp.
template <typename T>
__device__ T block_sum(T v, T* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    T t = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += sh[w];
    __syncthreads();
    return t;
}

#define DIMS_PER_LANE 4
#define IN_FLIGHT 4
#define MAX_WARPS 8

// The trim cutoff of one centroid's group, its members' distances mdist[b .. e) (e > b): the
// bits of the keep-th smallest distance, keep = count - floor(count * trim), found by a radix
// select over the bits of non-negative floats (their order is that of the bits); all bits set
// when none is dropped. Also the number kept (every thread gets both) and their mean
// distance, written to *spread by thread 0. One block (up to 8 warps) per group.
__device__ unsigned group_cut(const float* __restrict__ mdist, unsigned b, unsigned e,
                              float trim, unsigned* kept_out, float* __restrict__ spread) {
    __shared__ unsigned su[MAX_WARPS];
    __shared__ double sd[MAX_WARPS];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const unsigned count = e - b;
    const unsigned drop = (unsigned)floorf((float)count * trim);
    unsigned cut = 0xffffffffu;
    if (drop > 0) {
        // Radix select, 8 bits at a time from the top: which bucket holds the keep-th
        // smallest distance among members that share the prefix found so far.
        __shared__ unsigned hist[256];
        __shared__ unsigned pick[2];
        unsigned keep = count - drop, prefix = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int t = threadIdx.x; t < 256; t += blockDim.x) hist[t] = 0;
            __syncthreads();
            const unsigned hi_mask = shift == 24 ? 0u : (0xffffffffu << (shift + 8));
            for (unsigned p = b + threadIdx.x; p < e; p += blockDim.x) {
                unsigned v = __float_as_uint(mdist[p]);
                if ((v & hi_mask) == prefix) atomicAdd(&hist[(v >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (w == 0) {
                // The first bucket where the running count reaches keep: each lane sums
                // eight buckets, a warp scan finds the lane, that lane its bucket.
                unsigned h[8], sum = 0;
#pragma unroll
                for (int q = 0; q < 8; q++) sum += (h[q] = hist[8 * lane + q]);
                unsigned inc = sum;
                for (int o = 1; o < 32; o <<= 1) {
                    unsigned y = __shfl_up_sync(FULL, inc, o);
                    if (lane >= o) inc += y;
                }
                const unsigned reach = __ballot_sync(FULL, inc >= keep);
                if (lane == (reach ? __ffs(reach) - 1 : 31)) {
                    unsigned acc = inc - sum, dgt = 8 * lane;
                    for (int q = 0; q < 8; q++, dgt++) {
                        if (dgt == 255 || acc + h[q] >= keep) break;
                        acc += h[q];
                    }
                    pick[0] = dgt;
                    pick[1] = keep - acc;
                }
            }
            __syncthreads();
            prefix |= pick[0] << shift;
            keep = pick[1];
            __syncthreads();
        }
        cut = prefix;
    }
    unsigned kept = 0;
    double s = 0.0;
    for (unsigned p = b + threadIdx.x; p < e; p += blockDim.x) {
        float v = mdist[p];
        if (__float_as_uint(v) <= cut) { kept++; s += (double)v; }
    }
    kept = block_sum(kept, su);
    s = block_sum(s, sd);
    if (threadIdx.x == 0) *spread = (float)(s / kept);
    *kept_out = kept;
    return cut;
}

// One block (up to 8 warps) per centroid j, over its members order[start[j] .. start[j+1]]
// (their distances in mdist, same positions):
// 1. the trim cutoff and spread (`group_cut`);
// 2. the centroid = mean of the kept points (left as is when it has no points). Each warp
//    takes 32 members at a time (one per lane: their ids and distances in one load each),
//    then reads the kept members' rows IN_FLIGHT at a time, lanes across dimensions: a
//    member costs no round trip of its own.
extern "C" __global__ void update_means(const float* __restrict__ x, int d,
                                        const unsigned* __restrict__ order,
                                        const float* __restrict__ mdist,
                                        const unsigned* __restrict__ start, float trim,
                                        float* __restrict__ c, float* __restrict__ spread) {
    __shared__ double acc_sh[MAX_WARPS][32 * DIMS_PER_LANE];
    const int j = blockIdx.x, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5;
    const unsigned b = start[j], e = start[j + 1];
    if (e == b) {
        if (threadIdx.x == 0) spread[j] = 0.f;
        return;
    }
    unsigned kept;
    const unsigned cut = group_cut(mdist, b, e, trim, &kept, spread + j);
    const double inv = 1.0 / kept;
    for (int t0 = 0; t0 < d; t0 += 32 * DIMS_PER_LANE) {
        // Double sums: member order (set by the atomic scatter) then changes nothing once
        // rounded to float, so runs repeat.
        double acc[DIMS_PER_LANE];
#pragma unroll
        for (int r = 0; r < DIMS_PER_LANE; r++) acc[r] = 0.0;
        for (unsigned p0 = b + 32 * w; p0 < e; p0 += 32 * nw) {
            const unsigned p = p0 + lane;
            const bool in = p < e && __float_as_uint(mdist[p]) <= cut;
            const unsigned i = in ? order[p] : 0u;
            for (unsigned m = __ballot_sync(FULL, in); m;) {
                unsigned id[IN_FLIGHT];
#pragma unroll
                for (int u = 0; u < IN_FLIGHT; u++) {
                    const unsigned got = __shfl_sync(FULL, i, m ? __ffs(m) - 1 : 0);
                    id[u] = m ? got : 0xffffffffu;
                    m &= m - 1;
                }
                float v[IN_FLIGHT][DIMS_PER_LANE];
#pragma unroll
                for (int u = 0; u < IN_FLIGHT; u++)
#pragma unroll
                    for (int r = 0; r < DIMS_PER_LANE; r++) {
                        const int t = t0 + lane + 32 * r;
                        v[u][r] = id[u] != 0xffffffffu && t < d ? x[(size_t)id[u] * d + t] : 0.f;
                    }
#pragma unroll
                for (int u = 0; u < IN_FLIGHT; u++)
#pragma unroll
                    for (int r = 0; r < DIMS_PER_LANE; r++) acc[r] += (double)v[u][r];
            }
        }
#pragma unroll
        for (int r = 0; r < DIMS_PER_LANE; r++) acc_sh[w][lane + 32 * r] = acc[r];
        __syncthreads();
        for (int t = threadIdx.x; t < 32 * DIMS_PER_LANE && t0 + t < d; t += blockDim.x) {
            double tot = 0.0;
            for (int v = 0; v < nw; v++) tot += acc_sh[v][t];
            c[(size_t)j * d + t0 + t] = (float)(tot * inv);
        }
        __syncthreads();
    }
}

// The trim step of `update_means` alone, for points that are not all on the device: each
// centroid's cutoff and kept count into cut[j] and kept[j] (kept 0 for an empty group), its
// spread as there. Launched as `update_means` is, so the spread sums the same way.
extern "C" __global__ void trim_cuts(const float* __restrict__ mdist,
                                     const unsigned* __restrict__ start, float trim,
                                     unsigned* __restrict__ cut, unsigned* __restrict__ kept,
                                     float* __restrict__ spread) {
    const int j = blockIdx.x;
    const unsigned b = start[j], e = start[j + 1];
    if (e == b) {
        if (threadIdx.x == 0) { spread[j] = 0.f; kept[j] = 0u; }
        return;
    }
    unsigned kp;
    const unsigned c = group_cut(mdist, b, e, trim, &kp, spread + j);
    if (threadIdx.x == 0) { cut[j] = c; kept[j] = kp; }
}

// Adds each kept point of a block of `rows` rows (x: rows x d; their assignment and distance
// in assign and dist) into its centroid's sums (k x d doubles): one warp per row. Double
// sums of floats, as `update_means` takes them: their order changes nothing once rounded.
extern "C" __global__ void add_kept(const float* __restrict__ x, int rows, int d,
                                    const unsigned* __restrict__ assign,
                                    const float* __restrict__ dist,
                                    const unsigned* __restrict__ cut,
                                    double* __restrict__ sums) {
    const int lane = threadIdx.x & 31;
    for (int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
         r += gridDim.x * (blockDim.x >> 5)) {
        const unsigned j = assign[r];
        if (__float_as_uint(dist[r]) > cut[j]) continue;
        const float* v = x + (size_t)r * d;
        double* o = sums + (size_t)j * d;
        for (int t = lane; t < d; t += 32) atomicAdd(&o[t], (double)v[t]);
    }
}

// c = sums / kept for every centroid with kept points (others stay), rounded as
// `update_means` rounds.
extern "C" __global__ void finish_means(const double* __restrict__ sums,
                                        const unsigned* __restrict__ kept, int k, int d,
                                        float* __restrict__ c) {
    const size_t all = (size_t)k * d;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < all;
         i += (size_t)gridDim.x * blockDim.x) {
        const unsigned n = kept[i / d];
        if (n > 0) c[i] = (float)(sums[i] * (1.0 / n));
    }
}
