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

// Keeps the `want` smallest (distance, position) pairs seen, sorted, in local arrays; `held`
// counts them, so an insertion walks past the pairs held only, not the whole array (a thread
// sees a few codes of a list, and want may be 128).
__device__ __forceinline__ void offer(float* kd, unsigned* kp, int want, int& held, float v,
                                      unsigned p) {
    if (!(v < (held == want ? kd[want - 1] : INF))) return;
    int i = held < want ? held++ : want - 1;
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
__device__ void block_top(const float* kd, const unsigned* kp, int want, int held, float* sd,
                          unsigned* sp, int* st, float* out_d, unsigned* out_p) {
    int head = 0;
    for (int r = 0; r < want; r++) {
        float v = head < held ? kd[head] : INF;
        unsigned p = head < held ? kp[head] : 0xffffffffu;
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

// A list's table entry e: staged in shared memory when the table fits there, otherwise read
// through the read-only cache as the same sum (so the same bits either way).
struct SharedLut {
    const float* lut;
    __device__ float operator()(int e) const { return lut[e]; }
};
struct GlobalLut {
    const float* ta;
    const float* qt;
    int l2;
    __device__ float operator()(int e) const {
        return l2 ? __ldg(ta + e) + __ldg(qt + e) : __ldg(qt + e);
    }
};

// Where a scan's scores go: this thread's `want` best (top-k search).
struct TopSink {
    float* kd;
    unsigned* kp;
    int want;
    int* held;
    __device__ void operator()(float v, unsigned long long i) const { offer(kd, kp, want, *held, v, (unsigned)i); }
};

// Where a range search's scores go: those within `radius` counted per query and, in the
// second pass (`at` given), written at the query's offset (`at[qi]` + its next slot).
struct RangeSink {
    float radius;
    unsigned* count;
    const unsigned long long* at;
    const unsigned long long* ids;
    unsigned long long* out_id;
    float* out_d;
    int qi;
    __device__ void operator()(float v, unsigned long long i) const {
        if (!(v <= radius)) return;
        const unsigned slot = atomicAdd(count + qi, 1u);
        if (at) {
            out_id[at[qi] + slot] = ids[i];
            out_d[at[qi] + slot] = v;
        }
    }
};

// This thread's share of one list's codes [s0, s1), each score given to `sink`; with
// `filtered`, only the positions whose bit is set in `allow`.
template <class Lut, class Sink>
__device__ __forceinline__ void scan_codes(const unsigned char* __restrict__ codes, unsigned long long s0,
                           unsigned long long s1, int nsub, int ksub, float b0, Lut lut, Sink sink,
                           const unsigned* __restrict__ allow, int filtered) {
    for (unsigned long long i = s0 + threadIdx.x; i < s1; i += blockDim.x) {
        if (filtered && !((__ldg(allow + (i >> 5)) >> (i & 31)) & 1u)) continue;
        float v = b0;
        if (ksub == 16) {
            // Two sub-codes per byte, low nibble first.
            const int nbytes = nsub >> 1;
            const unsigned char* c = codes + i * nbytes;
            for (int b = 0; b < nbytes; b++) {
                v += lut((2 * b) * 16 + (c[b] & 15));
                v += lut((2 * b + 1) * 16 + (c[b] >> 4));
            }
        } else if ((nsub & 3) == 0) {
            // Four codes per load; the sum keeps the order of the byte loop below.
            const unsigned* c = reinterpret_cast<const unsigned*>(codes + i * nsub);
            for (int j = 0; j < nsub / 4; j++) {
                const unsigned w = c[j];
                v += lut((4 * j) * 256 + (w & 255));
                v += lut((4 * j + 1) * 256 + ((w >> 8) & 255));
                v += lut((4 * j + 2) * 256 + ((w >> 16) & 255));
                v += lut((4 * j + 3) * 256 + (w >> 24));
            }
        } else {
            const unsigned char* c = codes + i * nsub;
            for (int j = 0; j < nsub; j++) v += lut(j * 256 + c[j]);
        }
        sink(v, i);
    }
}

// One block per (probe, query): the list's table (terms + query table for L2, the query table
// alone for inner product; ksub entries per sub-quantizer), in shared memory when `staged`
// (the launch gives it nsub * ksub floats) or read from global memory otherwise, a scan of its
// codes (8-bit: a byte per sub-code; 4-bit: two per byte, low nibble first, nsub even), and
// the block's `want` best candidates (distance, position in the flat lists) to cand_d / cand_p.
// With `filtered`, positions whose bit in `allow` (one per vector of the flat lists) is clear
// are skipped.
extern "C" __global__ void scan_lists(const unsigned char* __restrict__ codes,
                                      const unsigned long long* __restrict__ start,
                                      const float* __restrict__ terms, int l2,
                                      const float* __restrict__ qt, int nsub, int ksub,
                                      const unsigned* __restrict__ probes,
                                      const float* __restrict__ base, int nprobe, int want,
                                      float* __restrict__ cand_d,
                                      unsigned* __restrict__ cand_p, int staged,
                                      const unsigned* __restrict__ allow, int filtered) {
    extern __shared__ float lut[];  // nsub * ksub when staged
    __shared__ float sd[32];
    __shared__ unsigned sp[32];
    __shared__ int st[33];
    const int p = blockIdx.x, qi = blockIdx.y;
    const unsigned a = probes[(size_t)qi * nprobe + p];
    const float* qtq = qt + (size_t)qi * nsub * ksub;
    const float* ta = terms + (size_t)a * nsub * ksub;
    if (staged)
        for (int e = threadIdx.x; e < nsub * ksub; e += blockDim.x)
            lut[e] = l2 ? ta[e] + qtq[e] : qtq[e];
    // A list probed twice (fewer lists than probes) is scanned once.
    bool repeat = false;
    for (int o = 0; o < p; o++) repeat |= probes[(size_t)qi * nprobe + o] == a;
    __syncthreads();
    float kd[MAX_WANT];
    unsigned kp[MAX_WANT];
    int held = 0;
    if (!repeat) {
        const float b0 = base[(size_t)qi * nprobe + p];
        const unsigned long long s0 = start[a], s1 = start[a + 1];
        const TopSink sink{kd, kp, want, &held};
        if (staged)
            scan_codes(codes, s0, s1, nsub, ksub, b0, SharedLut{lut}, sink, allow, filtered);
        else
            scan_codes(codes, s0, s1, nsub, ksub, b0, GlobalLut{ta, qtq, l2}, sink, allow, filtered);
    }
    const size_t o = ((size_t)qi * nprobe + p) * want;
    block_top(kd, kp, want, held, sd, sp, st, cand_d + o, cand_p + o);
}

// Range search, one block per (probe, query) as scan_lists: every vector scoring at most
// `radius` is counted in count[query]; with `at` (each query's offset, from the counts of a
// first pass), its id and score are also written there, in no particular order.
extern "C" __global__ void range_lists(const unsigned char* __restrict__ codes,
                                       const unsigned long long* __restrict__ start,
                                       const float* __restrict__ terms, int l2,
                                       const float* __restrict__ qt, int nsub, int ksub,
                                       const unsigned* __restrict__ probes,
                                       const float* __restrict__ base, int nprobe, float radius,
                                       const unsigned* __restrict__ allow, int filtered,
                                       const unsigned long long* __restrict__ ids,
                                       unsigned* __restrict__ count,
                                       const unsigned long long* __restrict__ at,
                                       unsigned long long* __restrict__ out_id,
                                       float* __restrict__ out_d) {
    const int p = blockIdx.x, qi = blockIdx.y;
    const unsigned a = probes[(size_t)qi * nprobe + p];
    for (int o = 0; o < p; o++)
        if (probes[(size_t)qi * nprobe + o] == a) return;  // a list probed twice counts once
    const float* qtq = qt + (size_t)qi * nsub * ksub;
    const float* ta = terms + (size_t)a * nsub * ksub;
    const RangeSink sink{radius, count, at, ids, out_id, out_d, qi};
    scan_codes(codes, start[a], start[a + 1], nsub, ksub, base[(size_t)qi * nprobe + p],
               GlobalLut{ta, qtq, l2}, sink, allow, filtered);
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
    const float* cd = cand_d + (size_t)qi * per;
    const unsigned* cp = cand_p + (size_t)qi * per;
    if (per == want) {
        // One probe: its candidates are already the best, in order.
        for (int r = threadIdx.x; r < want; r += blockDim.x) {
            out_d[(size_t)qi * want + r] = cd[r];
            out_id[(size_t)qi * want + r] = cp[r] == 0xffffffffu ? ~0ull : ids[cp[r]];
        }
        return;
    }
    float kd[MAX_WANT];
    unsigned kp[MAX_WANT];
    int held = 0;
    for (int e = threadIdx.x; e < per; e += blockDim.x) offer(kd, kp, want, held, cd[e], cp[e]);
    block_top(kd, kp, want, held, sd, sp, st, td, tp);
    if (threadIdx.x == 0) {
        for (int r = 0; r < want; r++) {
            out_d[(size_t)qi * want + r] = td[r];
            out_id[(size_t)qi * want + r] = tp[r] == 0xffffffffu ? ~0ull : ids[tp[r]];
        }
    }
}

// Total order of floats as unsigned keys (as Rust's f32::total_cmp): ties between equal
// distances then go to the smaller id, as the host's sort does.
__device__ __forceinline__ unsigned order_key(float f) {
    const unsigned u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exact re-rank, one block per query: each warp scores candidates against their raw rows
// (row = id, `raw_n` rows of d floats; VEC4: d % 4 == 0 and 16-byte aligned rows), then every
// candidate's rank among the query's `want` gives its slot, the first k written to out_id /
// out_d. Scores: squared L2, or minus the inner product (with the unit row for cosine, metric
// 2). Missing candidates (id ~0) score +inf; an id without a row and a score that is not
// finite leave the smallest such id in bad[0] and bad[1]. Ties in (score, id) go to the
// earlier candidate, so the ranks are 0..want-1, each once.
template <bool VEC4>
__device__ void rerank(const float* __restrict__ q, int d,
                       const unsigned long long* __restrict__ cand, int want,
                       const float* __restrict__ raw, unsigned long long raw_n, int metric,
                       int k, unsigned long long* __restrict__ out_id,
                       float* __restrict__ out_d, unsigned long long* bad) {
    __shared__ float sc[MAX_WANT];
    __shared__ unsigned long long si[MAX_WANT];
    const int qi = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* qq = q + (size_t)qi * d;
    for (int c = warp; c < want; c += blockDim.x >> 5) {
        const unsigned long long id = cand[(size_t)qi * want + c];
        float s = INF;
        if (id != ~0ull && id < raw_n) {
            const float* r = raw + id * (unsigned long long)d;
            float a = 0.f, vv = 0.f;
            if (VEC4) {
                const float4* r4 = reinterpret_cast<const float4*>(r);
                const float4* q4 = reinterpret_cast<const float4*>(qq);
                for (int t = lane; t < d / 4; t += 32) {
                    const float4 v = __ldg(r4 + t), u = __ldg(q4 + t);
                    if (metric == 0) {
                        const float e0 = u.x - v.x, e1 = u.y - v.y, e2 = u.z - v.z,
                                    e3 = u.w - v.w;
                        a += e0 * e0 + e1 * e1 + e2 * e2 + e3 * e3;
                    } else {
                        a += u.x * v.x + u.y * v.y + u.z * v.z + u.w * v.w;
                        vv += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
                    }
                }
            } else {
                for (int t = lane; t < d; t += 32) {
                    const float v = __ldg(r + t), u = __ldg(qq + t);
                    if (metric == 0) {
                        a += (u - v) * (u - v);
                    } else {
                        a += u * v;
                        vv += v * v;
                    }
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                a += __shfl_xor_sync(FULL, a, o);
                vv += __shfl_xor_sync(FULL, vv, o);
            }
            if (metric == 0) s = a;
            else if (metric == 2 && vv > 0.f) s = -(a / sqrtf(vv));
            else s = -a;
            if (lane == 0 && !isfinite(s)) atomicMin(bad + 1, id);
        } else if (id != ~0ull && lane == 0) {
            atomicMin(bad, id);
        }
        if (lane == 0) {
            sc[c] = s;
            si[c] = id;
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < want; c += blockDim.x) {
        const unsigned kc = order_key(sc[c]);
        const unsigned long long ic = si[c];
        int rank = 0;
        for (int o = 0; o < want; o++) {
            const unsigned ko = order_key(sc[o]);
            rank += ko < kc || (ko == kc && (si[o] < ic || (si[o] == ic && o < c)));
        }
        if (rank < k) {
            out_id[(size_t)qi * k + rank] = ic;
            out_d[(size_t)qi * k + rank] = sc[c];
        }
    }
}

#define RERANK_ARGS                                                                        \
    const float *__restrict__ q, int d, const unsigned long long *__restrict__ cand,      \
        int want, const float *__restrict__ raw, unsigned long long raw_n, int metric,    \
        int k, unsigned long long *__restrict__ out_id, float *__restrict__ out_d,        \
        unsigned long long *bad
extern "C" __global__ void rerank_rows(RERANK_ARGS) {
    rerank<false>(q, d, cand, want, raw, raw_n, metric, k, out_id, out_d, bad);
}
extern "C" __global__ void rerank_rows4(RERANK_ARGS) {
    rerank<true>(q, d, cand, want, raw, raw_n, metric, k, out_id, out_d, bad);
}
