// Index search on the device: the CUDA side of `backend::cuda`'s search. Lists live on the
// device back to back (codes, ids, start offsets), with the per-list L2 table terms.
// Header-free, like every kernel here.

#define FULL 0xffffffffu
#define MAX_WANT 128
#define INF __int_as_float(0x7f800000)

// Per query (one warp): coarse scores against every anchor, written over `dots` (q . a,
// nq x m), then the nprobe best lists in order (repeated warp argmin; ties to the smaller
// list). L2: score = |q|^2 + |a|^2 - 2 q.a; inner product: score = -q.a.
extern "C" __global__ void coarse_probe(const float* __restrict__ q, int nq, int d,
                                        float* __restrict__ dots, int m,
                                        const float* __restrict__ anorm, int l2, int nprobe,
                                        unsigned* __restrict__ probes,
                                        float* __restrict__ base) {
    const int qi = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (qi >= nq) return;
    float qn = 0.f;
    for (int t = lane; t < d; t += 32) qn += q[(size_t)qi * d + t] * q[(size_t)qi * d + t];
    for (int o = 16; o > 0; o >>= 1) qn += __shfl_xor_sync(FULL, qn, o);
    float* s = dots + (size_t)qi * m;
    for (int j = lane; j < m; j += 32) s[j] = l2 ? qn + anorm[j] - 2.f * s[j] : -s[j];
    __syncwarp();
    for (int p = 0; p < nprobe; p++) {
        float best = INF;
        int at = 0x7fffffff;
        for (int j = lane; j < m; j += 32) {
            float v = s[j];
            if (v < best) { best = v; at = j; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ob = __shfl_xor_sync(FULL, best, o);
            int oa = __shfl_xor_sync(FULL, at, o);
            if (ob < best || (ob == best && oa < at)) { best = ob; at = oa; }
        }
        if (at == 0x7fffffff) at = 0;  // fewer lists than probes: repeats are skipped later
        if (lane == 0) {
            probes[(size_t)qi * nprobe + p] = (unsigned)at;
            base[(size_t)qi * nprobe + p] = best;
            s[at] = INF;
        }
        __syncwarp();
    }
}

// Per (query, subspace): scale * <y_j, c> for every codeword c (scale -2 for L2, -1 for inner
// product). One thread per codeword; the sub-vector sits in shared memory.
extern "C" __global__ void query_tables(const float* __restrict__ y, int dp, int dsub,
                                        int ksub, const float* __restrict__ books,
                                        float scale, float* __restrict__ qt, int nsub) {
    extern __shared__ float yj[];
    const int qi = blockIdx.x, j = blockIdx.y;
    for (int t = threadIdx.x; t < dsub; t += blockDim.x)
        yj[t] = y[(size_t)qi * dp + j * dsub + t];
    __syncthreads();
    for (int c = threadIdx.x; c < ksub; c += blockDim.x) {
        const float* w = books + ((size_t)j * ksub + c) * dsub;
        float s = 0.f;
        for (int t = 0; t < dsub; t++) s += yj[t] * w[t];
        qt[((size_t)qi * nsub + j) * ksub + c] = scale * s;
    }
}

// Keeps the `want` smallest (distance, position) pairs seen, sorted, in local arrays.
__device__ __forceinline__ void offer(float* kd, unsigned* kp, int want, float v, unsigned p) {
    if (!(v < kd[want - 1])) return;
    int i = want - 1;
    while (i > 0 && kd[i - 1] > v) {
        kd[i] = kd[i - 1];
        kp[i] = kp[i - 1];
        i--;
    }
    kd[i] = v;
    kp[i] = p;
}

// The block's `want` best of every thread's sorted candidates: `want` rounds of a block-wide
// argmin over the threads' heads. Thread 0 writes them to out_d / out_p.
__device__ void block_top(const float* kd, const unsigned* kp, int want, float* sd,
                          unsigned* sp, int* st, float* out_d, unsigned* out_p) {
    int head = 0;
    for (int r = 0; r < want; r++) {
        float v = head < want ? kd[head] : INF;
        unsigned p = head < want ? kp[head] : 0xffffffffu;
        // Warp argmin, then across warps through shared memory.
        int who = threadIdx.x;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(FULL, v, o);
            unsigned op = __shfl_xor_sync(FULL, p, o);
            int ow = __shfl_xor_sync(FULL, who, o);
            if (ov < v || (ov == v && op < p)) { v = ov; p = op; who = ow; }
        }
        if ((threadIdx.x & 31) == 0) {
            sd[threadIdx.x >> 5] = v;
            sp[threadIdx.x >> 5] = p;
            st[threadIdx.x >> 5] = who;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 0;
            for (int w = 1; w < (int)(blockDim.x >> 5); w++)
                if (sd[w] < sd[b] || (sd[w] == sd[b] && sp[w] < sp[b])) b = w;
            out_d[r] = sd[b];
            out_p[r] = sp[b];
            st[32] = st[b];
        }
        __syncthreads();
        if (threadIdx.x == st[32]) head++;
        __syncthreads();
    }
}

// One block per (probe, query): the list's table (terms + query table for L2, the query table
// alone for inner product) in shared memory, a scan of its 8-bit codes, and the block's `want`
// best candidates (distance, position in the flat lists) to cand_d / cand_p.
extern "C" __global__ void scan_lists(const unsigned char* __restrict__ codes,
                                      const unsigned long long* __restrict__ start,
                                      const float* __restrict__ terms, int l2,
                                      const float* __restrict__ qt, int nsub,
                                      const unsigned* __restrict__ probes,
                                      const float* __restrict__ base, int nprobe, int want,
                                      float* __restrict__ cand_d,
                                      unsigned* __restrict__ cand_p) {
    extern __shared__ float lut[];  // nsub * 256
    __shared__ float sd[32];
    __shared__ unsigned sp[32];
    __shared__ int st[33];
    const int p = blockIdx.x, qi = blockIdx.y;
    const unsigned a = probes[(size_t)qi * nprobe + p];
    const float* qtq = qt + (size_t)qi * nsub * 256;
    const float* ta = terms + (size_t)a * nsub * 256;
    for (int e = threadIdx.x; e < nsub * 256; e += blockDim.x)
        lut[e] = l2 ? ta[e] + qtq[e] : qtq[e];
    // A list probed twice (fewer lists than probes) is scanned once.
    bool repeat = false;
    for (int o = 0; o < p; o++) repeat |= probes[(size_t)qi * nprobe + o] == a;
    __syncthreads();
    float kd[MAX_WANT];
    unsigned kp[MAX_WANT];
    for (int r = 0; r < want; r++) { kd[r] = INF; kp[r] = 0xffffffffu; }
    if (!repeat) {
        const float b0 = base[(size_t)qi * nprobe + p];
        const unsigned long long s0 = start[a], s1 = start[a + 1];
        for (unsigned long long i = s0 + threadIdx.x; i < s1; i += blockDim.x) {
            const unsigned char* c = codes + i * nsub;
            float v = b0;
            for (int j = 0; j < nsub; j++) v += lut[j * 256 + c[j]];
            offer(kd, kp, want, v, (unsigned)i);
        }
    }
    const size_t o = ((size_t)qi * nprobe + p) * want;
    block_top(kd, kp, want, sd, sp, st, cand_d + o, cand_p + o);
}

// One block per query: the `want` best of its nprobe x want candidates, as ids and distances.
extern "C" __global__ void merge_candidates(const float* __restrict__ cand_d,
                                            const unsigned* __restrict__ cand_p, int per,
                                            int want,
                                            const unsigned long long* __restrict__ ids,
                                            float* __restrict__ out_d,
                                            unsigned long long* __restrict__ out_id) {
    __shared__ float sd[32];
    __shared__ unsigned sp[32];
    __shared__ int st[33];
    __shared__ float td[MAX_WANT];
    __shared__ unsigned tp[MAX_WANT];
    const int qi = blockIdx.x;
    float kd[MAX_WANT];
    unsigned kp[MAX_WANT];
    for (int r = 0; r < want; r++) { kd[r] = INF; kp[r] = 0xffffffffu; }
    const float* cd = cand_d + (size_t)qi * per;
    const unsigned* cp = cand_p + (size_t)qi * per;
    for (int e = threadIdx.x; e < per; e += blockDim.x) offer(kd, kp, want, cd[e], cp[e]);
    block_top(kd, kp, want, sd, sp, st, td, tp);
    if (threadIdx.x == 0) {
        for (int r = 0; r < want; r++) {
            out_d[(size_t)qi * want + r] = td[r];
            out_id[(size_t)qi * want + r] = tp[r] == 0xffffffffu ? ~0ull : ids[tp[r]];
        }
    }
}
