// k-means steps on the device: the CUDA side of `backend::cuda`.
//
// Header-free on purpose (NVRTC 13 ships no standard headers). Distances come from a cuBLAS
// GEMM (dots = X C^T); these kernels turn dots into assignments, find each centroid's trim
// cutoff by bisection on the distance bits, and reduce the kept points into new centroids.
// Every launch stays on the device; only O(k) statistics go back to the host.

#define FULL 0xffffffffu

// Squared norm of each row: one warp per row.
extern "C" __global__ void row_norms(const float* __restrict__ x, int n, int d,
                                     float* __restrict__ out) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (row >= n) return;
    const float* r = x + (size_t)row * d;
    float s = 0.f;
    for (int t = lane; t < d; t += 32) s += r[t] * r[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
    if (lane == 0) out[row] = s;
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
extern "C" __global__ void argmin_rows(const float* __restrict__ dots, int rows, int k,
                                       const float* __restrict__ off,
                                       const float* __restrict__ bias, int use_bias,
                                       const float* __restrict__ xn, int row0,
                                       unsigned* __restrict__ assign, float* __restrict__ dist) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float* s = dots + (size_t)r * k;
    float best = __int_as_float(0x7f800000);
    int at = 0x7fffffff;
    for (int j = lane; j < k; j += 32) {
        float v = off[j] - 2.f * s[j];
        if (v < best) { best = v; at = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(FULL, best, o);
        int oa = __shfl_xor_sync(FULL, at, o);
        if (ob < best || (ob == best && oa < at)) { best = ob; at = oa; }
    }
    if (lane == 0) {
        if (at == 0x7fffffff) at = 0;  // every score was infinite or NaN
        int g = row0 + r;
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

// Trim cutoff by bisection over the bits of non-negative floats (their order is the order of
// the unsigned bit patterns). Each centroid j searches the smallest t in [lo, hi] with
// #{i in j : bits(dist_i) <= t} >= keep[j]; after 31 rounds lo = hi = the keep-th distance.
extern "C" __global__ void bisect_count(const unsigned* __restrict__ assign,
                                        const float* __restrict__ dist, int n,
                                        const unsigned* __restrict__ lo,
                                        const unsigned* __restrict__ hi,
                                        unsigned* __restrict__ below) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        unsigned a = assign[i];
        unsigned mid = lo[a] + ((hi[a] - lo[a]) >> 1);
        if ((unsigned)__float_as_int(dist[i]) <= mid) atomicAdd(&below[a], 1u);
    }
}

extern "C" __global__ void bisect_step(unsigned* __restrict__ lo, unsigned* __restrict__ hi,
                                       unsigned* __restrict__ below,
                                       const unsigned* __restrict__ keep, int k) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= k) return;
    unsigned mid = lo[j] + ((hi[j] - lo[j]) >> 1);
    if (below[j] >= keep[j]) hi[j] = mid; else lo[j] = mid + 1;
    below[j] = 0;
}

// Counting sort of point indices by centroid: cursor starts at each group's offset.
extern "C" __global__ void scatter(const unsigned* __restrict__ assign, int n,
                                   unsigned* __restrict__ cursor, unsigned* __restrict__ order) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        order[atomicAdd(&cursor[assign[i]], 1u)] = (unsigned)i;
}

// One block per centroid: the mean of its points at or below the cutoff (in double), written
// over the centroid when any point is kept; spread = mean kept distance. `cut` holds distance
// bits (0xffffffff keeps everything).
extern "C" __global__ void reduce_means(const float* __restrict__ x, int d,
                                        const float* __restrict__ dist,
                                        const unsigned* __restrict__ order,
                                        const unsigned* __restrict__ start,
                                        const unsigned* __restrict__ cut,
                                        float* __restrict__ c, float* __restrict__ spread) {
    __shared__ double part[32];
    __shared__ unsigned kept_shared;
    int j = blockIdx.x;
    unsigned b = start[j], e = start[j + 1], cj = cut[j];
    // Kept count and spread first: thread-strided over members, then a block sum.
    double s = 0.0;
    unsigned kept = 0;
    for (unsigned p = b + threadIdx.x; p < e; p += blockDim.x) {
        float v = dist[order[p]];
        if ((unsigned)__float_as_int(v) <= cj) { s += (double)v; kept++; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(FULL, s, o);
        kept += __shfl_xor_sync(FULL, kept, o);
    }
    if (threadIdx.x == 0) kept_shared = 0;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        part[threadIdx.x / 32] = s;
        atomicAdd(&kept_shared, kept);
    }
    __syncthreads();
    unsigned total = kept_shared;
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < (int)(blockDim.x / 32); w++) t += part[w];
        spread[j] = total ? (float)(t / total) : 0.f;
    }
    if (total == 0) return;
    double inv = 1.0 / total;
    // Each thread owns dimensions t, t + blockDim.x, ...: rows are read whole, coalesced.
    for (int t0 = 0; t0 < d; t0 += blockDim.x) {
        int t = t0 + threadIdx.x;
        if (t >= d) break;
        double acc = 0.0;
        for (unsigned p = b; p < e; p++) {
            unsigned i = order[p];
            if ((unsigned)__float_as_int(dist[i]) <= cj) acc += (double)x[(size_t)i * d + t];
        }
        c[(size_t)j * d + t] = (float)(acc * inv);
    }
}
