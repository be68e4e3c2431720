// Residual encoding on the device: the product-quantizer step of `backend::cuda`.
// Header-free, like every kernel here (NVRTC 13 ships no standard headers).

// Nearest codeword of each (row, subspace). Grid (row tiles, nsub); each thread takes R rows.
// Row i's codes start at out + i * nsub: a caller passes the row's bytes as `nsub` where the
// codes keep an error level after their sub-codes (the grid still has one column a sub-space).
// The block's sub-codebook (ksub x dsub) and its squared norms sit in shared memory; the rows'
// sub-vectors sit in registers, so one shared-memory read of a codeword value feeds R
// multiply-adds. Score |c|^2 - 2 y.c, first minimum on ties.
//
// EXACT kernels are built for one width (dsub == W): no padded columns, and each codeword is
// read from shared memory four floats at a time where W allows (a quarter of the load
// instructions, which bounded the padded kernels). The others are built for the next width up
// (8, 16 or 32) and skip the columns past dsub. Both sum the products in column order, so they
// give the same scores.
//
// The sub-vectors are read in the padded layout of `residuals` below, from rows of `ld` floats:
// either padded rows already (rem = nsub, no anchors), or raw rows (ld = d, rem = d % nsub,
// q = d / nsub) minus their anchors (anchors[assign[i]]), so that encoding without a rotation
// needs no residual pass of its own.
template <int W, int R, bool EXACT>
__device__ __forceinline__ void pq_assign_rows(const float* __restrict__ y, int n, int ld,
                                               int dsub, int ksub,
                                               const float* __restrict__ books,
                                               unsigned char* __restrict__ out, int nsub,
                                               const float* __restrict__ anchors,
                                               const unsigned* __restrict__ assign, int rem,
                                               int q) {
    extern __shared__ float4 sh4[];  // float4: 16-byte aligned for the wide reads
    float* cb = (float*)sh4;          // ksub * dsub
    float* cn = cb + ksub * dsub;     // ksub
    const int j = blockIdx.y;
    const float* src = books + (size_t)j * ksub * dsub;
    for (int t = threadIdx.x; t < ksub * dsub; t += blockDim.x) cb[t] = src[t];
    __syncthreads();
    for (int c = threadIdx.x; c < ksub; c += blockDim.x) {
        float s = 0.f;
        for (int t = 0; t < dsub; t++) s += cb[c * dsub + t] * cb[c * dsub + t];
        cn[c] = s;
    }
    __syncthreads();
    /* Rows i0, i0 + blockDim.x, ...: neighbouring threads read neighbouring rows. */
    const int i0 = blockIdx.x * blockDim.x * R + threadIdx.x;
    float v[R][W];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = i0 + r * blockDim.x, ii = i < n ? i : 0;
        const float* row = y + (size_t)ii * ld;
        const float* a = anchors ? anchors + (size_t)assign[ii] * ld : 0;
#pragma unroll
        for (int t = 0; t < W; t++) {
            const int col = j < rem ? j * dsub + t : (t < q ? rem * dsub + (j - rem) * q + t : -1);
            v[r][t] = (EXACT || t < dsub) && col >= 0 ? row[col] - (a ? a[col] : 0.f) : 0.f;
        }
    }
    float best[R];
    int at[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        best[r] = __int_as_float(0x7f800000);
        at[r] = 0;
    }
    for (int c = 0; c < ksub; c++) {
        float w[W];
        if (EXACT && W % 4 == 0) {
            const float4* w4 = (const float4*)(cb + c * W);
#pragma unroll
            for (int t = 0; t < W / 4; t++) {
                const float4 f = w4[t];
                w[4 * t] = f.x;
                w[4 * t + 1] = f.y;
                w[4 * t + 2] = f.z;
                w[4 * t + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int t = 0; t < W; t++) w[t] = EXACT || t < dsub ? cb[c * dsub + t] : 0.f;
        }
        float dot[R];
#pragma unroll
        for (int r = 0; r < R; r++) dot[r] = 0.f;
#pragma unroll
        for (int t = 0; t < W; t++) {
            if (EXACT || t < dsub) {
#pragma unroll
                for (int r = 0; r < R; r++) dot[r] += v[r][t] * w[t];
            }
        }
        const float norm = cn[c];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = norm - 2.f * dot[r];
            if (s < best[r]) {
                best[r] = s;
                at[r] = c;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int i = i0 + r * blockDim.x;
        if (i < n) out[(size_t)i * nsub + j] = (unsigned char)at[r];
    }
}

#define PQ_ASSIGN(NAME, W, R, EXACT)                                                          \
    extern "C" __global__ void NAME(const float* __restrict__ y, int n, int ld, int dsub,     \
                                    int ksub, const float* __restrict__ books,               \
                                    unsigned char* __restrict__ out, int nsub,               \
                                    const float* __restrict__ anchors,                       \
                                    const unsigned* __restrict__ assign, int rem, int q) {   \
        pq_assign_rows<W, R, EXACT>(y, n, ld, dsub, ksub, books, out, nsub, anchors, assign, \
                                    rem, q);                                                 \
    }

// The error level of each row's code (out, rows of `stride` bytes: the nsub sub-codes
// written by a PQ kernel above, then the level, written here): the level of `levels`
// (ascending, nlev of them) nearest to the squared error summed sub-space by sub-space, in
// column order, without contractions (as the host's `host::error_level` sums it); the lower
// of two at a tie. Rows are read as the PQ kernels read them. One thread per row.
// Its parameters begin as the PQ kernels' do (`stride` in place of their `nsub`).
extern "C" __global__ void error_levels(const float* __restrict__ y, int n, int ld, int dsub,
                                        int ksub, const float* __restrict__ books,
                                        unsigned char* __restrict__ out, int stride,
                                        const float* __restrict__ anchors,
                                        const unsigned* __restrict__ assign, int rem, int q,
                                        int nsub, const float* __restrict__ levels, int nlev) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* row = y + (size_t)i * ld;
    const float* a = anchors ? anchors + (size_t)assign[i] * ld : 0;
    unsigned char* code = out + (size_t)i * stride;
    float e = 0.f;
    for (int j = 0; j < nsub; j++) {
        const float* w = books + ((size_t)j * ksub + code[j]) * dsub;
        float s = 0.f;
        for (int t = 0; t < dsub; t++) {
            const int col = j < rem ? j * dsub + t : (t < q ? rem * dsub + (j - rem) * q + t : -1);
            const float v = col >= 0 ? __fsub_rn(row[col], a ? a[col] : 0.f) : 0.f;
            const float diff = __fsub_rn(v, w[t]);
            s = __fadd_rn(s, __fmul_rn(diff, diff));
        }
        e = __fadd_rn(e, s);
    }
    // The first level not below e, then the nearer of it and the one before.
    int lo = 0, hi = nlev;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (levels[mid] < e) lo = mid + 1; else hi = mid;
    }
    int pick = lo;
    if (lo == nlev) pick = nlev - 1;
    else if (lo > 0 && __fsub_rn(e, levels[lo - 1]) <= __fsub_rn(levels[lo], e)) pick = lo - 1;
    code[nsub] = (unsigned char)pick;
}

/* Rows per thread: as many as the registers comfortably hold. */
PQ_ASSIGN(pq_assign_8, 8, 4, false)
PQ_ASSIGN(pq_assign_16, 16, 4, false)
PQ_ASSIGN(pq_assign_32, 32, 2, false)
PQ_ASSIGN(pq_exact_4, 4, 4, true)
PQ_ASSIGN(pq_exact_8, 8, 4, true)
PQ_ASSIGN(pq_exact_12, 12, 4, true)
PQ_ASSIGN(pq_exact_16, 16, 4, true)
PQ_ASSIGN(pq_exact_24, 24, 2, true)
PQ_ASSIGN(pq_exact_32, 32, 2, true)

// y = x - anchor[assign] in the padded layout (row-major, n x dp, dp = nsub x dsub): when d
// is not a multiple of nsub, the first d % nsub sub-spaces hold dsub columns and the others
// dsub - 1 and a zero (quant::source_column). With no anchors (null), y is x padded: how
// search pads its queries.
extern "C" __global__ void residuals(const float* __restrict__ x, int n, int d,
                                     const float* __restrict__ anchors,
                                     const unsigned* __restrict__ assign, int dp, int dsub,
                                     float* __restrict__ y) {
    const size_t total = (size_t)n * dp;
    const int nsub = dp / dsub, q = d / nsub, rem = d % nsub;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t i = e / dp;
        int p = (int)(e - i * dp);
        int j = p / dsub, o = p - j * dsub;
        int t = j < rem ? p : (o < q ? rem * dsub + (j - rem) * q + o : -1);
        if (t < 0) { y[e] = 0.f; continue; }
        y[e] = x[i * d + t] - (anchors ? anchors[(size_t)assign[i] * d + t] : 0.f);
    }
}

// Input already in device memory gets the check host input gets on its way up: the first
// position (counted from `base` in the caller's input) of the n values holding NaN or an
// infinity (every exponent bit set) is folded into *first, which starts at ~0.
extern "C" __global__ void first_non_finite(const float* __restrict__ x, unsigned long long n,
                                            unsigned long long base,
                                            unsigned long long* __restrict__ first) {
    for (unsigned long long e = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         e < n; e += (unsigned long long)gridDim.x * blockDim.x) {
        if ((__float_as_uint(x[e]) & 0x7f800000u) == 0x7f800000u) atomicMin(first, base + e);
    }
}

// Each row of x (n x d) divided by its length, in place (zero rows stay zero): cosine's
// preparation, as the host's `quant::prepare` does it. One warp per row.
extern "C" __global__ void unit_rows(float* __restrict__ x, int n, int d) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= n) return;
    float* r = x + (size_t)row * d;
    float s = 0.f;
    for (int t = lane; t < d; t += 32) s += r[t] * r[t];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const float len = sqrtf(s);
    if (len > 0.f)
        for (int t = lane; t < d; t += 32) r[t] /= len;
}
