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

// v rounded to the nearest TF32 value (10 mantissa bits): exact input for the tensor cores.
__device__ float tf32_round(float v) {
    return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}

// Each row v of x (rows x d) as three TF32 pieces side by side (rows x 3d), so that one TF32
// GEMM of a point row [hi, hi, lo] with a centroid row [hi, lo, hi] sums hi.hi + hi.lo + lo.hi:
// x.c to within 3 * 2^-22 |x| |c| (the "3xTF32" split), at tensor-core speed.
extern "C" __global__ void split_tf32(const float* __restrict__ x, int rows, int d,
                                      int centroids, float* __restrict__ out) {
    size_t total = (size_t)rows * d;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / d, t = i - r * d;
        float v = x[i], hi = tf32_round(v), lo = tf32_round(v - hi);
        float* o = out + r * 3 * d + t;
        o[0] = hi;
        o[d] = centroids ? lo : hi;
        o[2 * d] = centroids ? hi : lo;
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
// slack > 0 marks the dots as approximate (TF32 or 3xTF32), each within slack/2 |x| |c_j| of
// x . c_j.
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
                                       const float* __restrict__ cn, int d, float slack) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float* s = dots + (size_t)r * k;
    float best = __int_as_float(0x7f800000), second = best, cmax = 0.f;
    int at = 0x7fffffff;
    for (int j = lane; j < k; j += 32) {
        float v = off[j] - 2.f * s[j];
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
            bool near = j < k && j != at && off[j] - 2.f * s[j] - slack * xl * sqrtf(cn[j]) <= hi;
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

// Counting sort of point indices by centroid: cursor starts at each group's offset.
extern "C" __global__ void scatter(const unsigned* __restrict__ assign, int n,
                                   unsigned* __restrict__ cursor, unsigned* __restrict__ order) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        order[atomicAdd(&cursor[assign[i]], 1u)] = (unsigned)i;
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

#define DIMS_PER_LANE 8
#define MAX_WARPS 8

// One block (up to 8 warps) per centroid j, over its members order[start[j] .. start[j+1]]:
// 1. the trim cutoff: the keep-th smallest distance, keep = count - floor(count * trim), found
//    by a radix select over the bits of non-negative floats (their order is that of the bits);
// 2. spread = mean kept distance;
// 3. the centroid = mean of the kept points (left as is when it has no points). Warps take
//    members in turn, lanes take dimensions, so each row is read whole and coalesced.
extern "C" __global__ void update_means(const float* __restrict__ x, int d,
                                        const float* __restrict__ dist,
                                        const unsigned* __restrict__ order,
                                        const unsigned* __restrict__ start, float trim,
                                        float* __restrict__ c, float* __restrict__ spread) {
    __shared__ unsigned su[MAX_WARPS];
    __shared__ double sd[MAX_WARPS];
    __shared__ double acc_sh[MAX_WARPS][32 * DIMS_PER_LANE];
    const int j = blockIdx.x, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5;
    const unsigned b = start[j], e = start[j + 1], count = e - b;
    if (count == 0) {
        if (threadIdx.x == 0) spread[j] = 0.f;
        return;
    }
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
                unsigned v = (unsigned)__float_as_int(dist[order[p]]);
                if ((v & hi_mask) == prefix) atomicAdd(&hist[(v >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                unsigned acc = 0, dgt = 0;
                for (; dgt < 255; dgt++) {
                    if (acc + hist[dgt] >= keep) break;
                    acc += hist[dgt];
                }
                pick[0] = dgt;
                pick[1] = keep - acc;
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
        float v = dist[order[p]];
        if ((unsigned)__float_as_int(v) <= cut) { kept++; s += (double)v; }
    }
    kept = block_sum(kept, su);
    s = block_sum(s, sd);
    if (threadIdx.x == 0) spread[j] = (float)(s / kept);
    const double inv = 1.0 / kept;
    for (int t0 = 0; t0 < d; t0 += 32 * DIMS_PER_LANE) {
        // Double sums: member order (set by the atomic scatter) then changes nothing once
        // rounded to float, so runs repeat.
        double acc[DIMS_PER_LANE];
#pragma unroll
        for (int r = 0; r < DIMS_PER_LANE; r++) acc[r] = 0.0;
        for (unsigned p = b + w; p < e; p += nw) {
            unsigned i = order[p];
            if ((unsigned)__float_as_int(dist[i]) > cut) continue;
            const float* row = x + (size_t)i * d + t0;
#pragma unroll
            for (int r = 0; r < DIMS_PER_LANE; r++) {
                int t = lane + 32 * r;
                if (t0 + t < d) acc[r] += (double)row[t];
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
