/* C harness for the vlc_compress ABI: every exported function, every error path. Built with
 * -std=c11 -Wall -Wextra -Wpedantic -Werror (and again under ASan/UBSan/LSan) by
 * tests/c_harness.rs, which passes the scratch directory as argv[1]. */
#define _POSIX_C_SOURCE 200809L
#include "vlc_compress.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int second_unit_version_ok(void);

static int failures = 0;
static int checks = 0;

#define expect(cond, msg)                                                        \
    do {                                                                         \
        checks++;                                                                \
        if (!(cond)) {                                                           \
            failures++;                                                          \
            fprintf(stderr, "%s:%d: FAILED: %s (%s)\n", __FILE__, __LINE__, msg, #cond); \
        }                                                                        \
    } while (0)

#define expect_status(call, want)                                                \
    do {                                                                         \
        vlcc_status got_ = (call);                                               \
        checks++;                                                                \
        if (got_ != (want)) {                                                    \
            char m_[256];                                                        \
            vlcc_last_error_message(m_, sizeof m_, NULL);                        \
            failures++;                                                          \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s: %s\n", __FILE__, __LINE__, #call, \
                    vlcc_status_str((uint32_t)got_), vlcc_status_str((uint32_t)(want)), m_); \
        }                                                                        \
    } while (0)

enum { N = 4000, D = 16, ANCHORS = 32, NQ = 64, K = 10 };

static float *clustered(size_t n, unsigned seed) {
    float *x = malloc(n * D * sizeof *x);
    float centres[8][D];
    unsigned s = seed;
    for (int c = 0; c < 8; c++)
        for (int t = 0; t < D; t++) {
            s = s * 1664525u + 1013904223u;
            centres[c][t] = (float)((s >> 8) % 2000) / 100.0f - 10.0f;
        }
    for (size_t i = 0; i < n; i++)
        for (int t = 0; t < D; t++) {
            s = s * 1664525u + 1013904223u;
            x[i * D + t] = centres[i % 8][t] + (float)((s >> 8) % 1000) / 500.0f - 1.0f;
        }
    return x;
}

/* float -> IEEE binary16 bits, round to nearest even, for values well inside the normal range. */
static uint16_t to_half(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t mant = u & 0x7fffffu;
    if (exp <= 0) return (uint16_t)sign;
    uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)h;
}

/* Searches through a fresh vlcc_search_params holding k, nprobe and rerank: the status of
 * the first call that fails (setting a value out of range fails at the set). */
typedef vlcc_status (*search_fn)(const vlcc_index *, const float *, size_t, const vlcc_search_params *,
                                 const float *, size_t, uint64_t *, float *);

static vlcc_status search_with(search_fn f, const vlcc_index *ix, const float *q, size_t nq, size_t k,
                               size_t nprobe, size_t rerank, const float *raw, size_t raw_n, uint64_t *ids,
                               float *dist) {
    vlcc_search_params *p = NULL;
    vlcc_status s = vlcc_search_params_new(&p);
    if (s == VLCC_STATUS_OK) s = vlcc_search_params_set(p, VLCC_SEARCH_PARAM_K, (double)k);
    if (s == VLCC_STATUS_OK) s = vlcc_search_params_set(p, VLCC_SEARCH_PARAM_NPROBE, (double)nprobe);
    if (s == VLCC_STATUS_OK) s = vlcc_search_params_set(p, VLCC_SEARCH_PARAM_RERANK, (double)rerank);
    if (s == VLCC_STATUS_OK) s = f(ix, q, nq, p, raw, raw_n, ids, dist);
    vlcc_search_params_free(p);
    return s;
}

#define search(...) search_with(vlcc_index_search, __VA_ARGS__)
#define search_device_raw(...) search_with(vlcc_index_search_device_raw, __VA_ARGS__)

struct search_job {
    const vlcc_index *ix;
    const float *q;
    uint64_t ids[NQ * K];
    float dist[NQ * K];
    vlcc_status status;
};

static void *search_thread(void *arg) {
    struct search_job *j = arg;
    j->status = search(j->ix, j->q, NQ, K, 8, 0, NULL, 0, j->ids, j->dist);
    return NULL;
}

static void test_versions_and_statuses(void) {
    expect(strcmp(vlcc_version(), VLCC_VERSION_STRING) == 0, "runtime version string matches the header");
    expect(vlcc_version_number() == VLCC_VERSION_NUMBER, "version number matches");
    expect(vlcc_abi_version() == VLCC_ABI_VERSION, "ABI version matches");
    expect(second_unit_version_ok(), "second translation unit agrees");
    expect(strcmp(vlcc_status_str(VLCC_STATUS_OK), "VLCC_STATUS_OK") == 0, "status name");
    expect(strcmp(vlcc_status_str(VLCC_STATUS_PANIC), "VLCC_STATUS_PANIC") == 0, "status name");
    expect(strcmp(vlcc_status_str(999), "VLCC_STATUS_UNKNOWN") == 0, "unknown status");
    expect(strcmp(vlcc_status_str(VLCC_STATUS_CALLBACK_FAILED), "VLCC_STATUS_CALLBACK_FAILED") == 0, "status name");
    for (uint32_t s = 0; s <= VLCC_STATUS_TIMED_OUT; s++)
        expect(strcmp(vlcc_status_str(s), "VLCC_STATUS_UNKNOWN") != 0, "every status has a name");
    expect(strcmp(vlcc_status_str(VLCC_STATUS_TIMED_OUT), "VLCC_STATUS_TIMED_OUT") == 0, "status name");
}

static void test_context(void) {
    vlcc_context *ctx = NULL;
    expect_status(vlcc_context_new(99, 0, 1, &ctx), VLCC_STATUS_INVALID_ARGUMENT);
    expect(ctx == NULL, "out untouched on error");
    char msg[256];
    size_t len = 0;
    expect_status(vlcc_last_error_message(NULL, 0, &len), VLCC_STATUS_OK);
    expect(len > 0, "a failure leaves a message");
    expect_status(vlcc_last_error_message(msg, 8, &len), VLCC_STATUS_OK);
    expect(strlen(msg) == 7 && len > 7, "messages are truncated to the buffer");
    expect_status(vlcc_context_new(VLCC_BACKEND_CPU, 0, 1, NULL), VLCC_STATUS_NULL_POINTER);
    vlcc_status s = vlcc_context_new(VLCC_BACKEND_CUDA, 0, 1, &ctx);
    expect(s == VLCC_STATUS_OK || s == VLCC_STATUS_BACKEND_UNAVAILABLE, "CUDA: runs or says unavailable");
    vlcc_context_free(ctx);
    ctx = NULL;
    s = vlcc_context_new(VLCC_BACKEND_WGPU, 0, 1, &ctx);
    expect(s == VLCC_STATUS_OK || s == VLCC_STATUS_BACKEND_UNAVAILABLE, "WGPU: runs or says unavailable");
    vlcc_context_free(ctx);
    ctx = NULL;
    expect_status(vlcc_context_new(VLCC_BACKEND_AUTO, 0, 2, &ctx), VLCC_STATUS_OK);
    uint32_t backend = 99;
    expect_status(vlcc_context_backend(ctx, &backend), VLCC_STATUS_OK);
    expect(backend != VLCC_BACKEND_AUTO && backend <= VLCC_BACKEND_WGPU, "AUTO resolves to a real backend");
    size_t threads = 0;
    expect_status(vlcc_context_threads(ctx, &threads), VLCC_STATUS_OK);
    expect(threads == 2, "thread count");
    expect_status(vlcc_context_threads(NULL, &threads), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_context_backend(ctx, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_context_set_memory_cap(ctx, 0), VLCC_STATUS_OK);
    expect_status(vlcc_context_set_memory_cap(NULL, 0), VLCC_STATUS_NULL_POINTER);
    vlcc_context_free(ctx);
    vlcc_context_free(NULL);
}

static vlcc_compressor *trained(vlcc_context *ctx, const float *x, unsigned seed) {
    vlcc_compressor *c = NULL;
    expect_status(vlcc_compressor_new(ctx, &c), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_ANCHORS, ANCHORS), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BYTES_PER_VECTOR, 8), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_MAX_ITERS, 8), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_PQ_ITERS, 8), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_SEED, seed), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train(c, x, N, D), VLCC_STATUS_OK);
    return c;
}

static void test_compressor(vlcc_context *ctx, const float *x) {
    vlcc_compressor *c = NULL;
    expect_status(vlcc_compressor_new(NULL, &c), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_new(ctx, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_new(ctx, &c), VLCC_STATUS_OK);

    double v = 0;
    expect_status(vlcc_compressor_set_param(c, 999, 1), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BITS, 5), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_ANCHORS, 2.5), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_TRIM, NAN), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_METRIC, 7), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_get_param(c, VLCC_PARAM_BITS, &v), VLCC_STATUS_OK);
    expect(v == 8, "rejected values leave the parameter unchanged");
    expect_status(vlcc_compressor_get_param(c, 999, &v), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_get_param(c, VLCC_PARAM_BITS, NULL), VLCC_STATUS_NULL_POINTER);
    static const uint32_t params[] = {
        VLCC_PARAM_ANCHORS, VLCC_PARAM_BYTES_PER_VECTOR, VLCC_PARAM_BITS, VLCC_PARAM_METRIC, VLCC_PARAM_ROTATION,
        VLCC_PARAM_MAX_ITERS, VLCC_PARAM_TOL, VLCC_PARAM_INITIAL_TEMP, VLCC_PARAM_COOLING_RATE, VLCC_PARAM_TRIM,
        VLCC_PARAM_BALANCE, VLCC_PARAM_MAINTENANCE_INTERVAL, VLCC_PARAM_MERGE_THRESHOLD, VLCC_PARAM_SPLIT_FACTOR,
        VLCC_PARAM_MAX_POINTS_PER_ANCHOR, VLCC_PARAM_SEED, VLCC_PARAM_PQ_ITERS, VLCC_PARAM_PQ_TRAIN_POINTS,
        VLCC_PARAM_OPQ_ITERS, VLCC_PARAM_INIT, VLCC_PARAM_OPQ_TRAIN_POINTS, VLCC_PARAM_PRECISION};
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        expect_status(vlcc_compressor_get_param(c, params[i], &v), VLCC_STATUS_OK);
        expect_status(vlcc_compressor_set_param(c, params[i], v), VLCC_STATUS_OK);
        /* The bounds hold the default, which is what a new compressor reads back. */
        double lo = 0, hi = 0, def = -1;
        uint32_t whole = 2;
        expect_status(vlcc_param_bounds(params[i], &lo, &hi, &def, &whole), VLCC_STATUS_OK);
        expect(lo <= def && def <= hi && def == v && whole <= 1, "bounds hold the default");
        expect_status(vlcc_param_bounds(params[i], NULL, NULL, NULL, NULL), VLCC_STATUS_OK);
    }
    double lo = 0, hi = 0;
    uint32_t whole = 0;
    expect_status(vlcc_param_bounds(VLCC_PARAM_BYTES_PER_VECTOR, &lo, &hi, NULL, &whole), VLCC_STATUS_OK);
    expect(lo == 1 && hi == 4096 && whole == 1, "bytes per vector: whole, 1..4096");
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BYTES_PER_VECTOR, hi), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BYTES_PER_VECTOR, hi + 1), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BYTES_PER_VECTOR, lo - 1), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BYTES_PER_VECTOR, 16), VLCC_STATUS_OK);
    expect_status(vlcc_param_bounds(VLCC_PARAM_TRIM, &lo, &hi, NULL, &whole), VLCC_STATUS_OK);
    expect(lo == 0 && hi < 0.5 && whole == 0, "trim: [0, 0.5)");
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_TRIM, hi), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_TRIM, 0.5), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_TRIM, 0.05), VLCC_STATUS_OK);
    expect_status(vlcc_param_bounds(999, &lo, &hi, NULL, NULL), VLCC_STATUS_INVALID_ARGUMENT);

    size_t cs = 0, d = 0;
    uint8_t codes1[64];
    expect_status(vlcc_compressor_codec_size(c, &cs), VLCC_STATUS_INVALID_STATE);
    expect_status(vlcc_compressor_dim(c, &d), VLCC_STATUS_INVALID_STATE);
    expect_status(vlcc_compressor_encode(c, x, 1, codes1, sizeof codes1), VLCC_STATUS_INVALID_STATE);

    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_ANCHORS, ANCHORS), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_BYTES_PER_VECTOR, 8), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train(c, NULL, N, D), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_train(c, x, 10, D), VLCC_STATUS_NOT_ENOUGH_DATA);
    expect_status(vlcc_compressor_train(c, x, 0, D), VLCC_STATUS_NOT_ENOUGH_DATA);
    expect_status(vlcc_compressor_train(c, x, N, 0), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_compressor_train(c, (const float *)((const char *)x + 1), 100, D), VLCC_STATUS_UNALIGNED);
    float *bad = malloc(N * D * sizeof *bad);
    memcpy(bad, x, N * D * sizeof *bad);
    bad[77] = NAN;
    expect_status(vlcc_compressor_train(c, bad, N, D), VLCC_STATUS_NON_FINITE);
    vlcc_train_report rep;
    expect_status(vlcc_compressor_train_report(c, &rep), VLCC_STATUS_INVALID_STATE);
    expect_status(vlcc_compressor_train(c, x, N, D), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train_report(c, &rep), VLCC_STATUS_OK);
    expect(rep.energy > 0 && rep.iterations >= 1 && rep.max_list_over_mean >= 1, "training report");

    expect_status(vlcc_compressor_codec_size(c, &cs), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_dim(c, &d), VLCC_STATUS_OK);
    expect(cs == 9 && d == D, "1-byte anchor id + 8 code bytes");
    uint64_t fp = 0;
    expect_status(vlcc_compressor_fingerprint(c, &fp), VLCC_STATUS_OK);
    expect(fp != 0, "fingerprint");

    const size_t n = 500;
    uint8_t *codes = malloc(n * cs);
    memset(codes, 0xAB, n * cs);
    expect_status(vlcc_compressor_encode(c, x, n, codes, n * cs - 1), VLCC_STATUS_BUFFER_TOO_SMALL);
    expect(codes[0] == 0xAB && codes[n * cs - 2] == 0xAB, "nothing written on error");
    expect_status(vlcc_compressor_encode(c, x, n, NULL, n * cs), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_encode(c, bad, 10, (uint8_t *)bad, 10 * cs), VLCC_STATUS_OVERLAP);
    expect_status(vlcc_compressor_encode(c, bad + 70, 1, codes, cs), VLCC_STATUS_NON_FINITE);
    expect_status(vlcc_compressor_encode(c, x, n, codes, n * cs), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_encode(c, x, 0, NULL, 0), VLCC_STATUS_OK);
    /* Device input: the pointer checks that need no device, then this CPU context's answer. */
    expect_status(vlcc_compressor_encode_device(c, NULL, n, codes, n * cs), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_encode_device(c, (const float *)((const char *)x + 1), n, codes, n * cs),
                  VLCC_STATUS_UNALIGNED);
    expect_status(vlcc_compressor_encode_device(c, x, n, codes, n * cs - 1), VLCC_STATUS_BUFFER_TOO_SMALL);
    memset(codes1, 0xAB, sizeof codes1);
    expect_status(vlcc_compressor_encode_device(c, x, 1, codes1, cs), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect(codes1[0] == 0xAB, "nothing written on error");
    expect_status(vlcc_compressor_encode_device(NULL, x, 1, codes1, cs), VLCC_STATUS_NULL_POINTER);
    /* Even with no work, a device-memory call on a CPU context says it cannot read device memory. */
    expect_status(vlcc_compressor_encode_device(c, NULL, 0, NULL, 0), VLCC_STATUS_BACKEND_UNAVAILABLE);

    float *y = malloc(n * D * sizeof *y);
    expect_status(vlcc_compressor_decode(c, codes, n, y, n * D - 1), VLCC_STATUS_BUFFER_TOO_SMALL);
    expect_status(vlcc_compressor_decode(c, codes, n, y, n * D), VLCC_STATUS_OK);
    double err = 0, var = 0;
    for (size_t i = 0; i < n * D; i++) {
        err += (x[i] - y[i]) * (x[i] - y[i]);
        var += x[i] * x[i];
    }
    expect(err < 0.05 * var, "decode reconstructs closely");
    uint8_t corrupt[16];
    memcpy(corrupt, codes, cs);
    corrupt[0] = 250; /* anchor id beyond the 32 anchors */
    expect_status(vlcc_compressor_decode(c, corrupt, 1, y, D), VLCC_STATUS_INVALID_ARGUMENT);

    uint16_t *h = malloc(n * D * sizeof *h);
    for (size_t i = 0; i < n * D; i++) h[i] = to_half(x[i]);
    uint8_t *codes16 = malloc(n * cs);
    expect_status(vlcc_compressor_encode_f16(c, h, n, codes16, n * cs), VLCC_STATUS_OK);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += memcmp(codes + i * cs, codes16 + i * cs, cs) == 0;
    expect(same > n * 9 / 10, "f16 input encodes like f32 for most vectors");

    vlcc_compressor_free(c);
    vlcc_compressor_free(NULL);
    free(codes);
    free(codes16);
    free(h);
    free(y);
    free(bad);
}

static void test_index(vlcc_context *ctx, const float *x, const char *dir) {
    vlcc_compressor *c = trained(ctx, x, 7);
    vlcc_index *ix = NULL;
    expect_status(vlcc_index_new(NULL, &ix), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_new(c, &ix), VLCC_STATUS_OK);
    uint64_t *ids = malloc(N * sizeof *ids);
    for (size_t i = 0; i < N; i++) ids[i] = 1000 + i;
    expect_status(vlcc_index_add(ix, x, N, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_add(NULL, x, N, ids), VLCC_STATUS_NULL_POINTER);
    /* Device input: pointer checks, then this CPU context's answer; nothing is added. */
    expect_status(vlcc_index_add_device(ix, x, N, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_add_device(ix, NULL, N, ids), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_add_device(NULL, x, N, ids), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_add_device(ix, x, N, ids), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(vlcc_index_add_device(ix, NULL, 0, NULL), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(vlcc_index_add(ix, x, N, ids), VLCC_STATUS_OK);
    size_t size = 0, d = 0;
    expect_status(vlcc_index_size(ix, &size), VLCC_STATUS_OK);
    expect_status(vlcc_index_dim(ix, &d), VLCC_STATUS_OK);
    expect(size == N && d == D, "size and dim");
    vlcc_index_info st;
    expect_status(vlcc_index_stats(ix, &st), VLCC_STATUS_OK);
    expect(st.vectors == N && st.lists == ANCHORS && st.residual_code_size == 8 && !st.memory_mapped, "stats");
    /* The two sizes are named apart: a standalone code adds the anchor id to the residual code. */
    size_t codec = 0;
    expect_status(vlcc_compressor_codec_size(c, &codec), VLCC_STATUS_OK);
    expect(codec == st.residual_code_size + 1, "codec size = 1-byte anchor id + residual code");

    const float *q = x + 123 * D;
    uint64_t out_ids[NQ * K];
    float out_d[NQ * K];
    /* The parameters object: defaults, range checks that change nothing, NULL handling. */
    vlcc_search_params *sp = NULL;
    double spv = 0;
    expect_status(vlcc_search_params_new(NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_new(&sp), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_get(sp, VLCC_SEARCH_PARAM_K, &spv), VLCC_STATUS_OK);
    expect(spv == 10, "k defaults to 10");
    expect_status(vlcc_search_params_get(sp, VLCC_SEARCH_PARAM_NPROBE, &spv), VLCC_STATUS_OK);
    expect(spv == 16, "nprobe defaults to 16");
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_K, 2.5), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_NPROBE, -1), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_RERANK, NAN), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set(sp, 99, 1), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_get(sp, 99, &spv), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_get(sp, VLCC_SEARCH_PARAM_K, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_set(NULL, VLCC_SEARCH_PARAM_K, 1), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_get(sp, VLCC_SEARCH_PARAM_K, &spv), VLCC_STATUS_OK);
    expect(spv == 10, "refused values change nothing");
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_K, K), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, NULL, NULL, 0, out_ids, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_search_device_raw(ix, q, NQ, NULL, x, N, out_ids, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_search(ix, q, NQ, sp, NULL, 0, out_ids, out_d), VLCC_STATUS_OK);
    /* rerank below k is refused by the search, not the set. */
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_RERANK, K - 1), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, sp, x, N, out_ids, out_d), VLCC_STATUS_INVALID_ARGUMENT);
    vlcc_search_params_free(sp);
    vlcc_search_params_free(NULL);

    expect_status(search(ix, q, NQ, 0, 8, 0, NULL, 0, out_ids, out_d), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(search(ix, q, NQ, K, 0, 0, NULL, 0, out_ids, out_d), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(search(ix, q, NQ, K, 8, 5, x, N, out_ids, out_d), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(search(ix, q, NQ, K, 8, 50, NULL, N, out_ids, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(search(ix, q, NQ, K, 8, 0, NULL, 0, NULL, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(search(ix, q, NQ, K, 8, 0, NULL, 0, out_ids, (float *)out_ids), VLCC_STATUS_OVERLAP);
    /* Raw rows are by id: ids start at 1000, so a raw array of N rows lacks most of them. */
    expect_status(search(ix, q, NQ, K, 8, 50, x, N, out_ids, out_d), VLCC_STATUS_INVALID_ARGUMENT);
    /* Raw rows in device memory: pointer checks, then this CPU context's answer. */
    expect_status(search_device_raw(ix, q, NQ, K, 8, 50, NULL, N, out_ids, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(search_device_raw(ix, q, NQ, K, 8, 50, x, N, NULL, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(search_device_raw(ix, q, NQ, K, 8, 5, x, N, out_ids, out_d), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(search_device_raw(ix, q, NQ, K, 8, 50, x, N, out_ids, out_d), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(search_device_raw(ix, q, NQ, K, 8, 0, NULL, 0, out_ids, out_d), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(search_device_raw(ix, q, 0, K, 8, 0, NULL, 0, out_ids, out_d), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(search(ix, q, NQ, K, 8, 0, NULL, 0, out_ids, out_d), VLCC_STATUS_OK);
    size_t self_hits = 0;
    for (size_t i = 0; i < NQ; i++) self_hits += out_ids[i * K] == 1000 + 123 + i;
    expect(self_hits > NQ * 8 / 10, "a stored vector finds itself first");
    for (size_t i = 0; i < NQ; i++) expect(out_d[i * K] <= out_d[i * K + K - 1], "distances ascend");

    /* 16 threads searching one index return exactly what sequential calls return. */
    struct search_job jobs[16];
    pthread_t th[16];
    for (int t = 0; t < 16; t++) {
        jobs[t].ix = ix;
        jobs[t].q = q;
        pthread_create(&th[t], NULL, search_thread, &jobs[t]);
    }
    for (int t = 0; t < 16; t++) {
        pthread_join(th[t], NULL);
        expect(jobs[t].status == VLCC_STATUS_OK, "thread search ok");
        expect(memcmp(jobs[t].ids, out_ids, sizeof out_ids) == 0, "thread ids match sequential");
        expect(memcmp(jobs[t].dist, out_d, sizeof out_d) == 0, "thread distances match sequential");
    }

    /* k larger than the index: missing slots are VLCC_NO_ID. */
    vlcc_index *tiny = NULL;
    expect_status(vlcc_index_new(c, &tiny), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(tiny, x, 3, ids), VLCC_STATUS_OK);
    uint16_t half_rows[2 * D];
    for (size_t i = 0; i < 2 * D; i++) half_rows[i] = to_half(x[i]);
    uint64_t half_ids[2] = {5000, 5001};
    expect_status(vlcc_index_add_f16(tiny, half_rows, 2, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_add_f16(tiny, half_rows, 2, half_ids), VLCC_STATUS_OK);
    expect_status(vlcc_index_remove(tiny, half_ids, 2, &size), VLCC_STATUS_OK);
    expect(size == 2, "f16 rows were added");
    uint64_t t_ids[5];
    float t_d[5];
    expect_status(search(tiny, q, 1, 5, 64, 0, NULL, 0, t_ids, t_d), VLCC_STATUS_OK);
    expect(t_ids[3] == VLCC_NO_ID && t_ids[4] == VLCC_NO_ID && isnan(t_d[4]), "missing results marked");

    /* Save, load (mapped and copied), serialize: identical search results. */
    char path[1024], path2[1024], cbpath[1024];
    snprintf(path, sizeof path, "%s/index.vlcc", dir);
    snprintf(path2, sizeof path2, "%s/damaged.vlcc", dir);
    snprintf(cbpath, sizeof cbpath, "%s/codebook.vlcc", dir);
    expect_status(vlcc_index_save(ix, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_save(ix, path), VLCC_STATUS_OK);
    for (int mm = 0; mm <= 1; mm++) {
        vlcc_index *back = NULL;
        expect_status(vlcc_index_load(ctx, path, mm, &back), VLCC_STATUS_OK);
        uint64_t b_ids[NQ * K];
        float b_d[NQ * K];
        expect_status(search(back, q, NQ, K, 8, 0, NULL, 0, b_ids, b_d), VLCC_STATUS_OK);
        expect(memcmp(b_ids, out_ids, sizeof b_ids) == 0 && memcmp(b_d, out_d, sizeof b_d) == 0, "loaded index searches the same");
        expect_status(vlcc_index_stats(back, &st), VLCC_STATUS_OK);
        expect(st.memory_mapped == (uint32_t)mm, "memory-mapped flag");
        vlcc_index_free(back);
    }
    /* A deferred load checks structure and codebook now, every checksum on verify. */
    {
        vlcc_index *lazy = NULL;
        vlcc_index_memory mem;
        expect_status(vlcc_index_load(ctx, path, VLCC_LOAD_FLAG_MMAP | VLCC_LOAD_FLAG_DEFER_CHECKSUMS, &lazy), VLCC_STATUS_OK);
        expect_status(vlcc_index_verify(lazy), VLCC_STATUS_OK);
        expect_status(vlcc_index_verify(NULL), VLCC_STATUS_NULL_POINTER);
        expect_status(vlcc_index_memory_usage(lazy, NULL), VLCC_STATUS_NULL_POINTER);
        expect_status(vlcc_index_memory_usage(lazy, &mem), VLCC_STATUS_OK);
        expect(mem.memory_mapped == 1 && mem.search_tables == 0 && mem.ids == 8 * N, "memory before a search");
        uint64_t l_ids[NQ * K];
        float l_d[NQ * K];
        expect_status(search(lazy, q, NQ, K, 8, 0, NULL, 0, l_ids, l_d), VLCC_STATUS_OK);
        expect(memcmp(l_ids, out_ids, sizeof l_ids) == 0, "a deferred load searches the same");
        expect_status(vlcc_index_memory_usage(lazy, &mem), VLCC_STATUS_OK);
        expect(mem.search_tables > 0 && mem.codes > 0, "tables built by the first search");
        vlcc_index_free(lazy);
    }
    vlcc_buffer buf = {NULL, 0};
    expect_status(vlcc_index_serialize(ix, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_serialize(ix, &buf), VLCC_STATUS_OK);
    vlcc_index *copy = NULL;
    expect_status(vlcc_index_deserialize(ctx, buf.data, buf.len, &copy), VLCC_STATUS_OK);
    uint64_t c_ids[NQ * K];
    float c_d[NQ * K];
    expect_status(search(copy, q, NQ, K, 8, 0, NULL, 0, c_ids, c_d), VLCC_STATUS_OK);
    expect(memcmp(c_ids, out_ids, sizeof c_ids) == 0, "deserialized index searches the same");
    buf.data[buf.len / 2] ^= 0x40;
    vlcc_index *broken = NULL;
    expect_status(vlcc_index_deserialize(ctx, buf.data, buf.len, &broken), VLCC_STATUS_CORRUPT);
    expect_status(vlcc_index_deserialize(ctx, buf.data, 40, &broken), VLCC_STATUS_CORRUPT);
    expect(broken == NULL, "no index from corrupt bytes");
    /* The damaged bytes whole: a deferred load refuses them or its verify does. */
    FILE *f = fopen(path2, "wb");
    fwrite(buf.data, 1, buf.len, f);
    fclose(f);
    vlcc_status lazy_s = vlcc_index_load(ctx, path2, VLCC_LOAD_FLAG_DEFER_CHECKSUMS, &broken);
    if (lazy_s == VLCC_STATUS_OK) {
        expect_status(vlcc_index_verify(broken), VLCC_STATUS_CORRUPT);
        vlcc_index_free(broken);
        broken = NULL;
    } else {
        expect(lazy_s == VLCC_STATUS_CORRUPT, "a damaged file is refused or fails verify");
    }
    f = fopen(path2, "wb");
    fwrite(buf.data, 1, buf.len / 3, f);
    fclose(f);
    expect_status(vlcc_index_load(ctx, path2, 1, &broken), VLCC_STATUS_CORRUPT);
    snprintf(path2, sizeof path2, "%s/missing.vlcc", dir);
    expect_status(vlcc_index_load(ctx, path2, 1, &broken), VLCC_STATUS_IO);
    vlcc_buffer_free(&buf);
    expect(buf.data == NULL && buf.len == 0, "buffer reset");
    vlcc_buffer_free(&buf);
    vlcc_buffer_free(NULL);

    /* Re-rank with raw rows by id: ids 0..N-1 this time. */
    vlcc_index *byrow = NULL;
    for (size_t i = 0; i < N; i++) ids[i] = i;
    expect_status(vlcc_index_new(c, &byrow), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(byrow, x, N, ids), VLCC_STATUS_OK);
    expect_status(search(byrow, q, NQ, K, 8, 50, x, N, out_ids, out_d), VLCC_STATUS_OK);
    size_t exact = 0;
    for (size_t i = 0; i < NQ; i++) exact += out_ids[i * K] == 123 + i && out_d[i * K] == 0.0f;
    expect(exact == NQ, "re-ranked distances are exact: each query finds itself at distance 0");

    /* Remove and merge. */
    size_t removed = 0;
    uint64_t gone[3] = {0, 1, 2};
    expect_status(vlcc_index_remove(byrow, gone, 3, &removed), VLCC_STATUS_OK);
    expect(removed == 3, "removed count");
    expect_status(vlcc_index_remove(byrow, gone, 3, NULL), VLCC_STATUS_OK);
    expect_status(vlcc_index_merge(byrow, byrow), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_index_merge(byrow, tiny), VLCC_STATUS_OK);
    expect_status(vlcc_index_size(byrow, &size), VLCC_STATUS_OK);
    expect(size == N - 3 + 3, "merge appends");
    vlcc_compressor *other = trained(ctx, x, 99);
    vlcc_index *foreign = NULL;
    expect_status(vlcc_index_new(other, &foreign), VLCC_STATUS_OK);
    expect_status(vlcc_index_merge(byrow, foreign), VLCC_STATUS_CODEBOOK_MISMATCH);

    /* Codebook files and buffers. */
    uint64_t fp1 = 0, fp2 = 0;
    expect_status(vlcc_compressor_save_codebook(c, cbpath), VLCC_STATUS_OK);
    vlcc_compressor *loaded = NULL;
    expect_status(vlcc_compressor_load_codebook(ctx, cbpath, &loaded), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_fingerprint(c, &fp1), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_fingerprint(loaded, &fp2), VLCC_STATUS_OK);
    expect(fp1 == fp2, "codebook file round trip");
    expect_status(vlcc_compressor_load_codebook(ctx, path2, &loaded), VLCC_STATUS_IO);
    expect_status(vlcc_compressor_serialize_codebook(c, &buf), VLCC_STATUS_OK);
    vlcc_compressor *fromb = NULL;
    expect_status(vlcc_compressor_deserialize_codebook(ctx, buf.data, buf.len, &fromb), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_fingerprint(fromb, &fp2), VLCC_STATUS_OK);
    expect(fp1 == fp2, "codebook buffer round trip");
    vlcc_buffer_free(&buf);
    /* An index built from a loaded codebook merges with one from the original. */
    vlcc_index *twin = NULL;
    expect_status(vlcc_index_new(loaded, &twin), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(twin, x, 10, ids), VLCC_STATUS_OK);
    expect_status(vlcc_index_merge(byrow, twin), VLCC_STATUS_OK);

    /* Reconstruction and anchors. */
    size_t count = 0;
    expect_status(vlcc_index_reconstruct(tiny, NULL, NULL, 0, &count), VLCC_STATUS_OK);
    expect(count == 3, "reconstruct count query");
    uint64_t r_ids[3];
    float r_vec[3 * D];
    expect_status(vlcc_index_reconstruct(tiny, r_ids, r_vec, 2, &count), VLCC_STATUS_BUFFER_TOO_SMALL);
    expect_status(vlcc_index_reconstruct(tiny, r_ids, r_vec, 3, &count), VLCC_STATUS_OK);
    double r_err = 0;
    for (size_t i = 0; i < 3; i++) {
        size_t row = (size_t)(r_ids[i] - 1000);
        for (size_t t = 0; t < D; t++) r_err += fabs(r_vec[i * D + t] - x[row * D + t]);
    }
    expect(r_err < 3.0 * D, "reconstructed vectors are close to the originals");
    size_t n_anchors = 0;
    expect_status(vlcc_compressor_anchors(c, NULL, 0, &n_anchors), VLCC_STATUS_OK);
    expect(n_anchors == ANCHORS, "anchor count");
    float *anchors = malloc(ANCHORS * D * sizeof *anchors);
    expect_status(vlcc_compressor_anchors(c, anchors, ANCHORS * D - 1, &n_anchors), VLCC_STATUS_BUFFER_TOO_SMALL);
    expect_status(vlcc_compressor_anchors(c, anchors, ANCHORS * D, &n_anchors), VLCC_STATUS_OK);
    expect(isfinite(anchors[0]) && isfinite(anchors[ANCHORS * D - 1]), "anchors copied");
    free(anchors);

    /* The index outlives the compressor and context it came from. */
    vlcc_compressor_free(c);
    expect_status(search(ix, q, NQ, K, 8, 0, NULL, 0, out_ids, out_d), VLCC_STATUS_OK);

    vlcc_index_free(ix);
    vlcc_index_free(copy);
    vlcc_index_free(tiny);
    vlcc_index_free(byrow);
    vlcc_index_free(foreign);
    vlcc_index_free(twin);
    vlcc_index_free(NULL);
    vlcc_compressor_free(other);
    vlcc_compressor_free(loaded);
    vlcc_compressor_free(fromb);
    free(ids);
}

/* Filter callbacks: allow multiples of 5; fail on any id. */
static int every_fifth(void *user, uint64_t id) {
    (void)user;
    return id % 5 == 0;
}
static int refuse(void *user, uint64_t id) {
    (void)id;
    return *(const int *)user;
}

/* A fetch callback over the rows of `user` (id = row); a failing one. */
static int fetch_rows(void *user, const uint64_t *ids, size_t n, float *out) {
    const float *x = user;
    for (size_t i = 0; i < n; i++) memcpy(out + i * D, x + ids[i] * D, D * sizeof *out);
    return VLCC_STATUS_OK;
}
static int fetch_fails(void *user, const uint64_t *ids, size_t n, float *out) {
    (void)user, (void)ids, (void)n, (void)out;
    return VLCC_STATUS_IO;
}

/* Filters through the search parameters, and access by id, on an index of ids 0..N-1. */
static void test_filters_and_ids(vlcc_context *ctx, const float *x) {
    vlcc_compressor *c = trained(ctx, x, 5);
    vlcc_index *ix = NULL;
    uint64_t *ids = malloc(N * sizeof *ids);
    for (size_t i = 0; i < N; i++) ids[i] = i;
    expect_status(vlcc_index_new(c, &ix), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(ix, x, N, ids), VLCC_STATUS_OK);
    const float *q = x + 123 * D;
    uint64_t r_ids[NQ * K], want_ids[NQ * K];
    float r_d[NQ * K], want_d[NQ * K];
    vlcc_search_params *p = NULL;
    expect_status(vlcc_search_params_new(&p), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_set(p, VLCC_SEARCH_PARAM_NPROBE, 64), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, p, NULL, 0, want_ids, want_d), VLCC_STATUS_OK);

    /* Bitset of the even ids: k even hits per query. */
    uint8_t bits[N / 8];
    memset(bits, 0x55, sizeof bits);
    expect_status(vlcc_search_params_set_filter_bitset(NULL, bits, N), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_set_filter_bitset(p, NULL, N), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_set_filter_bitset(p, bits, N), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, p, NULL, 0, r_ids, r_d), VLCC_STATUS_OK);
    size_t even = 0;
    for (size_t i = 0; i < NQ * K; i++) even += r_ids[i] % 2 == 0 && r_ids[i] != VLCC_NO_ID;
    expect(even == NQ * K, "bitset filter: k allowed hits per query");
    /* Sorted ids: fewer than k allowed, so three hits and then missing slots. */
    uint64_t few[3] = {7, 8, 9}, unsorted[3] = {9, 8, 7};
    expect_status(vlcc_search_params_set_filter_ids(p, unsorted, 3), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set_filter_ids(p, few, 3), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, 1, p, NULL, 0, r_ids, r_d), VLCC_STATUS_OK);
    expect(r_ids[0] >= 7 && r_ids[0] <= 9 && r_ids[2] >= 7 && r_ids[2] <= 9, "id filter hits");
    expect(r_ids[3] == VLCC_NO_ID && isnan(r_d[3]) && r_ids[K - 1] == VLCC_NO_ID, "id filter pads");
    /* A callback: multiples of five; a negative answer fails the search, writing nothing. */
    expect_status(vlcc_search_params_set_filter_callback(p, NULL, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_set_filter_callback(p, every_fifth, NULL), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, p, NULL, 0, r_ids, r_d), VLCC_STATUS_OK);
    size_t fifth = 0;
    for (size_t i = 0; i < NQ * K; i++) fifth += r_ids[i] % 5 == 0;
    expect(fifth == NQ * K, "callback filter");
    int fail = -2;
    expect_status(vlcc_search_params_set_filter_callback(p, refuse, &fail), VLCC_STATUS_OK);
    r_ids[0] = 42;
    expect_status(vlcc_index_search(ix, q, NQ, p, NULL, 0, r_ids, r_d), VLCC_STATUS_CALLBACK_FAILED);
    expect(r_ids[0] == 42, "nothing written on a callback failure");
    expect_status(search_device_raw(ix, q, 1, K, 8, 0, NULL, 0, r_ids, r_d), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(vlcc_index_search_device_raw(ix, q, 1, p, NULL, 0, r_ids, r_d), VLCC_STATUS_INVALID_ARGUMENT);
    /* Cleared: the unfiltered results again. */
    expect_status(vlcc_search_params_clear_filter(NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_clear_filter(p), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, p, NULL, 0, r_ids, r_d), VLCC_STATUS_OK);
    expect(memcmp(r_ids, want_ids, sizeof r_ids) == 0, "cleared filter");
    vlcc_search_params_free(p);

    /* Re-rank through a fetch callback: what the dense rows give; its failure fails the search. */
    vlcc_search_params *fp = NULL;
    uint64_t f_ids[NQ * K];
    float f_d[NQ * K];
    expect_status(vlcc_search_params_new(&fp), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_set(fp, VLCC_SEARCH_PARAM_RERANK, 40), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, fp, x, N, want_ids, want_d), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_set_fetch(NULL, fetch_rows, (void *)x), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_search_params_set_fetch(fp, fetch_rows, (void *)x), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, fp, x, N, f_ids, f_d), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_index_search(ix, q, NQ, fp, NULL, 0, f_ids, f_d), VLCC_STATUS_OK);
    expect(memcmp(f_ids, want_ids, sizeof f_ids) == 0 && memcmp(f_d, want_d, sizeof f_d) == 0,
           "fetch re-rank equals the dense re-rank");
    expect_status(vlcc_search_params_set_fetch(fp, fetch_fails, NULL), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, fp, NULL, 0, f_ids, f_d), VLCC_STATUS_CALLBACK_FAILED);
    /* Removed: re-rank needs rows again. */
    expect_status(vlcc_search_params_set_fetch(fp, NULL, NULL), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, NQ, fp, NULL, 0, f_ids, f_d), VLCC_STATUS_INVALID_ARGUMENT);
    vlcc_search_params_free(fp);
    expect_status(search(ix, q, NQ, K, 64, 0, NULL, 0, want_ids, want_d), VLCC_STATUS_OK);

    /* Refinement vectors: re-rank with no rows from the caller, close to the exact re-rank. */
    vlcc_index *refined = NULL;
    uint32_t kind = 9;
    expect_status(vlcc_index_new_with_refine(c, 7, &refined), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_index_new_with_refine(c, VLCC_REFINE_INT8, &refined), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(refined, x, N, ids), VLCC_STATUS_OK);
    expect_status(vlcc_index_refine(refined, &kind), VLCC_STATUS_OK);
    expect(kind == VLCC_REFINE_INT8, "refinement kind");
    expect_status(vlcc_index_refine(ix, &kind), VLCC_STATUS_OK);
    expect(kind == VLCC_REFINE_NONE, "no refinement");
    expect_status(search(refined, q, NQ, K, 16, 40, x, N, want_ids, want_d), VLCC_STATUS_OK);
    expect_status(search(refined, q, NQ, K, 16, 40, NULL, 0, f_ids, f_d), VLCC_STATUS_OK);
    size_t agree = 0;
    for (size_t i = 0; i < NQ; i++) agree += f_ids[i * K] == want_ids[i * K];
    expect(agree >= NQ - 2, "refined re-rank finds the exact nearest");
    expect_status(vlcc_index_add_device(refined, x, 1, ids), VLCC_STATUS_BACKEND_UNAVAILABLE);
    expect_status(vlcc_index_merge(refined, ix), VLCC_STATUS_INVALID_ARGUMENT);
    /* Bounds around every hit, and the certified re-rank (exact over the probed lists). */
    float lo[NQ * K], hi[NQ * K];
    uint64_t rr_n[NQ];
    uint8_t cert[NQ];
    vlcc_search_params *bp = NULL;
    expect_status(vlcc_search_params_new(&bp), VLCC_STATUS_OK);
    expect_status(vlcc_index_search_bounds(ix, q, NQ, bp, NULL, 0, f_ids, f_d, lo, hi, NULL, NULL), VLCC_STATUS_INVALID_STATE);
    expect_status(vlcc_index_search_bounds(refined, q, NQ, bp, NULL, 0, f_ids, f_d, lo, hi, rr_n, cert), VLCC_STATUS_OK);
    int inside = 1;
    for (size_t i = 0; i < NQ * K; i++) {
        const float *v = x + f_ids[i] * D;
        float e = 0;
        for (size_t t = 0; t < D; t++) e += (q[(i / K) * D + t] - v[t]) * (q[(i / K) * D + t] - v[t]);
        inside &= lo[i] <= e * 1.00001f + 1e-5f && e <= hi[i] * 1.00001f + 1e-5f;
    }
    expect(inside && rr_n[0] == 0 && cert[0] == 0, "true distances within the bounds");
    double auto_v = 0;
    expect_status(vlcc_search_params_set(bp, VLCC_SEARCH_PARAM_RERANK_AUTO, 2), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set(bp, VLCC_SEARCH_PARAM_RERANK_AUTO, 1), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_get(bp, VLCC_SEARCH_PARAM_RERANK_AUTO, &auto_v), VLCC_STATUS_OK);
    expect(auto_v == 1, "auto re-rank set");
    expect_status(vlcc_search_params_set(bp, VLCC_SEARCH_PARAM_RERANK, N), VLCC_STATUS_OK);
    expect_status(vlcc_index_search_bounds(refined, q, NQ, bp, NULL, 0, f_ids, f_d, lo, hi, rr_n, cert), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_index_search_bounds(refined, q, NQ, bp, x, N, f_ids, f_d, lo, hi, rr_n, cert), VLCC_STATUS_OK);
    expect_status(search(refined, q, NQ, K, 16, N, x, N, want_ids, want_d), VLCC_STATUS_OK);
    size_t certified_all = 0;
    for (size_t i = 0; i < NQ; i++) certified_all += cert[i] == 1 && rr_n[i] > 0;
    expect(certified_all == NQ && memcmp(f_ids, want_ids, sizeof f_ids) == 0, "auto re-rank equals re-ranking every probed vector");
    expect_status(vlcc_index_search(refined, q, NQ, bp, x, N, r_ids, r_d), VLCC_STATUS_OK);
    expect(memcmp(r_ids, want_ids, sizeof r_ids) == 0, "auto through vlcc_index_search");
    vlcc_search_params_free(bp);
    vlcc_index_free(refined);
    expect_status(search(ix, q, NQ, K, 64, 0, NULL, 0, want_ids, want_d), VLCC_STATUS_OK);

    /* Range search: the hits of a radius at the 5th of an unfiltered top-k, best first. */
    vlcc_search_params *rp = NULL;
    expect_status(vlcc_search_params_new(&rp), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_set(rp, VLCC_SEARCH_PARAM_NPROBE, 64), VLCC_STATUS_OK);
    vlcc_range_results *rr = NULL;
    expect_status(vlcc_index_range_search(ix, q, 2, rp, want_d[4], NULL, 0, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_range_search(ix, q, 2, rp, NAN, NULL, 0, &rr), VLCC_STATUS_INVALID_ARGUMENT);
    expect(rr == NULL, "no results on failure");
    expect_status(vlcc_index_range_search(ix, q, 2, rp, want_d[4], NULL, 0, &rr), VLCC_STATUS_OK);
    size_t rnq = 0;
    const size_t *roff = NULL;
    const uint64_t *rids = NULL;
    const float *rdist = NULL;
    expect_status(vlcc_range_results_view(NULL, &rnq, &roff, &rids, &rdist), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_range_results_view(rr, &rnq, &roff, &rids, &rdist), VLCC_STATUS_OK);
    expect_status(vlcc_range_results_view(rr, NULL, NULL, NULL, NULL), VLCC_STATUS_OK);
    expect(rnq == 2 && roff[0] == 0 && roff[1] >= 5 && roff[2] >= roff[1], "range offsets");
    int in_order = 1;
    for (size_t i = 0; i < roff[1]; i++) in_order &= rdist[i] <= want_d[4] && (i == 0 || rdist[i - 1] <= rdist[i]);
    expect(in_order && rids[0] == want_ids[0], "range hits within the radius, nearest first");
    vlcc_range_results_free(rr);
    vlcc_range_results_free(NULL);
    vlcc_search_params_free(rp);

    /* By id. */
    uint64_t ask[3] = {5, N + 5, 0};
    uint8_t has[3] = {9, 9, 9};
    expect_status(vlcc_index_contains(ix, ask, 3, NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_contains(ix, ask, 3, has), VLCC_STATUS_OK);
    expect(has[0] == 1 && has[1] == 0 && has[2] == 1, "contains");
    float v[3 * D];
    expect_status(vlcc_index_reconstruct_ids(ix, ask, 3, v), VLCC_STATUS_INVALID_ARGUMENT);
    uint64_t held[2] = {5, 0};
    expect_status(vlcc_index_reconstruct_ids(ix, held, 2, v), VLCC_STATUS_OK);
    double err = 0;
    for (size_t t = 0; t < D; t++) err += fabs(v[t] - x[5 * D + t]) + fabs(v[D + t] - x[t]);
    expect(err < 2.0 * D, "reconstructed by id");
    size_t cs = 0, ccs = 0;
    expect_status(vlcc_index_codec_size(ix, &cs), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_codec_size(c, &ccs), VLCC_STATUS_OK);
    expect(cs == ccs && cs > 0, "index and compressor codes agree in size");
    uint8_t *codes = malloc(2 * cs);
    float back[2 * D];
    expect_status(vlcc_index_get_codes(ix, ask, 2, codes), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_index_get_codes(ix, held, 2, codes), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_decode(c, codes, 2, back, 2 * D), VLCC_STATUS_OK);
    expect(memcmp(back, v, sizeof back) == 0, "codes by id decode to the reconstruction");
    size_t removed = 0;
    expect_status(vlcc_index_remove(ix, held, 2, &removed), VLCC_STATUS_OK);
    expect_status(vlcc_index_contains(ix, held, 2, has), VLCC_STATUS_OK);
    expect(removed == 2 && has[0] == 0 && has[1] == 0, "removed ids are gone");
    free(codes);
    free(ids);
    vlcc_index_free(ix);
    vlcc_compressor_free(c);
}

/* Progress: counts reports per phase and cancels at report number `stop_at` (for calls with
 * a fixed number of reports), or with `stop_in_codebooks` at the codebooks' first (1) or last
 * (2) report: training also re-reports on a clock, so its count varies. */
typedef struct {
    int reports, stop_at, phases_seen, went_back;
    vlcc_phase last_phase;
    uint64_t last_done;
    int stop_in_codebooks;
} progress_log;

static int log_progress(void *user, vlcc_phase phase, uint64_t done, uint64_t total) {
    progress_log *l = user;
    if (done > total) l->went_back++;
    if (l->reports > 0 && phase == l->last_phase && done < l->last_done) l->went_back++;
    l->phases_seen |= 1 << (int)phase;
    l->last_phase = phase;
    l->last_done = done;
    int in_codebooks = phase == VLCC_PHASE_CODEBOOKS;
    if (l->stop_in_codebooks == 1 && in_codebooks) return 1;
    if (l->stop_in_codebooks == 2 && in_codebooks && done == total) return 1;
    return l->reports++ >= l->stop_at;
}

static int serialized_equal(const vlcc_index *a, const vlcc_buffer *want) {
    vlcc_buffer got = {NULL, 0};
    if (vlcc_index_serialize(a, &got) != VLCC_STATUS_OK) return 0;
    int same = got.len == want->len && memcmp(got.data, want->data, got.len) == 0;
    vlcc_buffer_free(&got);
    return same;
}

static void test_progress_and_cancel(vlcc_context *ctx, const float *x) {
    /* A full training heard through the context: anchors, then codebooks, never backwards. */
    progress_log all = {0, 1 << 30, 0, 0, VLCC_PHASE_ANCHORS, 0, 0};
    expect_status(vlcc_context_set_progress(NULL, log_progress, &all), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_context_set_progress(ctx, log_progress, &all), VLCC_STATUS_OK);
    vlcc_compressor *c = trained(ctx, x, 5);
    expect(all.reports > 10, "training reports its steps");
    expect(all.phases_seen == 3 && all.went_back == 0, "anchors and codebooks, in order");
    expect_status(vlcc_context_set_progress(ctx, NULL, NULL), VLCC_STATUS_OK);
    uint64_t fp = 0, fp_after = 0;
    expect_status(vlcc_compressor_fingerprint(c, &fp), VLCC_STATUS_OK);

    /* Cancelled at the first report, the codebooks' first and the very last: the codebook
     * stays, and nothing reports after the cancel. */
    for (int mode = 0; mode < 3; mode++) {
        progress_log l = {0, mode == 0 ? 0 : 1 << 30, 0, 0, VLCC_PHASE_ANCHORS, 0, mode};
        expect_status(vlcc_compressor_set_progress(c, log_progress, &l), VLCC_STATUS_OK);
        expect_status(vlcc_compressor_set_param(c, VLCC_PARAM_SEED, 99), VLCC_STATUS_OK);
        expect_status(vlcc_compressor_train(c, x, N, D), VLCC_STATUS_CANCELLED);
        expect_status(vlcc_compressor_fingerprint(c, &fp_after), VLCC_STATUS_OK);
        expect(fp_after == fp, "a cancelled train keeps the codebook");
        expect(l.last_phase == (mode == 0 ? VLCC_PHASE_ANCHORS : VLCC_PHASE_CODEBOOKS), "cancelled where asked");
        expect(mode != 2 || l.last_done > 0, "the last report");
    }
    /* An untrained compressor stays untrained. */
    vlcc_compressor *fresh = NULL;
    progress_log l0 = {0, 3, 0, 0, VLCC_PHASE_ANCHORS, 0, 0};
    expect_status(vlcc_compressor_new(ctx, &fresh), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_param(fresh, VLCC_PARAM_ANCHORS, ANCHORS), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_set_progress(NULL, log_progress, &l0), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_set_progress(fresh, log_progress, &l0), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train(fresh, x, N, D), VLCC_STATUS_CANCELLED);
    expect_status(vlcc_compressor_fingerprint(fresh, &fp_after), VLCC_STATUS_INVALID_STATE);
    vlcc_compressor_free(fresh);

    /* The training memory estimate, and the cap checked against it before training. */
    uint64_t host = 0, device = 1;
    expect_status(vlcc_compressor_estimate_memory(c, N, D, &host, &device), VLCC_STATUS_OK);
    expect(host > (uint64_t)N * D && device == 0, "an estimate on the CPU");
    expect_status(vlcc_compressor_estimate_memory(c, N, D, NULL, &device), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_compressor_set_progress(c, NULL, NULL), VLCC_STATUS_OK);
    /* The device cap: nothing to cap on the CPU backend. */
    expect_status(vlcc_context_set_device_memory_cap(NULL, 1), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_context_set_device_memory_cap(ctx, 1), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train(c, x, N, D), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_fingerprint(c, &fp), VLCC_STATUS_OK);
    expect_status(vlcc_context_set_device_memory_cap(ctx, 0), VLCC_STATUS_OK);
    /* Queries rotated in f32 on every CPU, or (0, the default) in integers where it pays. */
    expect_status(vlcc_context_set_exact_rotation(NULL, 1), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_context_set_exact_rotation(ctx, 1), VLCC_STATUS_OK);
    expect_status(vlcc_context_set_exact_rotation(ctx, 0), VLCC_STATUS_OK);
    /* Under half its estimate: the same codebook in less memory where the capped estimate
       fits (the codebooks' residuals rebuilt where read), else refused. */
    uint64_t capped = 0;
    expect_status(vlcc_context_set_memory_cap(ctx, (size_t)(host / 2)), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_estimate_memory(c, N, D, &capped, &device), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train(c, x, N, D),
                  capped <= host / 2 ? VLCC_STATUS_OK : VLCC_STATUS_OUT_OF_MEMORY);
    expect_status(vlcc_compressor_fingerprint(c, &fp_after), VLCC_STATUS_OK);
    expect(fp_after == fp, "a capped train gives, or keeps, the same codebook");
    /* Far under it: refused, and the codebook kept. */
    expect_status(vlcc_context_set_memory_cap(ctx, (size_t)(host / 50)), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_train(c, x, N, D), VLCC_STATUS_OUT_OF_MEMORY);
    expect_status(vlcc_compressor_fingerprint(c, &fp_after), VLCC_STATUS_OK);
    expect(fp_after == fp, "a refused train keeps the codebook");
    expect_status(vlcc_context_set_memory_cap(ctx, 0), VLCC_STATUS_OK);

    /* Encoding: cancelled at its first report, nothing written. */
    size_t cs = 0;
    expect_status(vlcc_compressor_codec_size(c, &cs), VLCC_STATUS_OK);
    uint8_t *codes = calloc(N, cs);
    progress_log le = {0, 0, 0, 0, VLCC_PHASE_ANCHORS, 0, 0};
    expect_status(vlcc_compressor_set_progress(c, log_progress, &le), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_encode(c, x, N, codes, N * cs), VLCC_STATUS_CANCELLED);
    int untouched = 1;
    for (size_t i = 0; i < N * cs; i++) untouched &= codes[i] == 0;
    expect(untouched && le.phases_seen == 1 << VLCC_PHASE_ENCODE, "a cancelled encode writes nothing");
    expect_status(vlcc_compressor_set_progress(c, NULL, NULL), VLCC_STATUS_OK);
    expect_status(vlcc_compressor_encode(c, x, N, codes, N * cs), VLCC_STATUS_OK);
    free(codes);

    /* Add and merge: cancelled, the index keeps its bytes. */
    vlcc_index *ix = NULL, *other = NULL;
    expect_status(vlcc_index_new(c, &ix), VLCC_STATUS_OK);
    expect_status(vlcc_index_new(c, &other), VLCC_STATUS_OK);
    uint64_t ids[N];
    for (size_t i = 0; i < N; i++) ids[i] = 1000 + i;
    expect_status(vlcc_index_add(ix, x, N / 2, ids), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(other, x + (N / 2) * D, N / 2, ids + N / 2), VLCC_STATUS_OK);
    vlcc_buffer before = {NULL, 0};
    expect_status(vlcc_index_serialize(ix, &before), VLCC_STATUS_OK);
    for (int stop = 0; stop < 2; stop++) {
        progress_log la = {0, stop, 0, 0, VLCC_PHASE_ANCHORS, 0, 0};
        expect_status(vlcc_index_set_progress(ix, log_progress, &la), VLCC_STATUS_OK);
        expect_status(vlcc_index_add(ix, x + (N / 2) * D, N / 2, ids + N / 2), VLCC_STATUS_CANCELLED);
        expect(serialized_equal(ix, &before), "a cancelled add leaves the index");
        expect_status(vlcc_index_merge(ix, other), VLCC_STATUS_CANCELLED);
        expect(serialized_equal(ix, &before), "a cancelled merge leaves the index");
    }
    expect_status(vlcc_index_set_progress(NULL, NULL, NULL), VLCC_STATUS_NULL_POINTER);
    progress_log lm = {0, 1 << 30, 0, 0, VLCC_PHASE_ANCHORS, 0, 0};
    expect_status(vlcc_index_set_progress(ix, log_progress, &lm), VLCC_STATUS_OK);
    expect_status(vlcc_index_merge(ix, other), VLCC_STATUS_OK);
    expect(lm.phases_seen == 1 << VLCC_PHASE_MERGE && lm.went_back == 0, "merge reports its lists");
    size_t size = 0;
    expect_status(vlcc_index_size(ix, &size), VLCC_STATUS_OK);
    expect(size == N, "the merge landed");
    expect(strcmp(vlcc_status_str(VLCC_STATUS_CANCELLED), "VLCC_STATUS_CANCELLED") == 0, "status name");

    /* Estimates for building and searching; the cap on adds, merges and searches. */
    uint64_t bh = 0, bd = 1, sh = 0, sd = 1, ah = 0, ad = 1, qh = 0, qd = 1;
    expect_status(vlcc_estimate_memory(c, VLCC_WORK_BUILD, N, D, &bh, &bd), VLCC_STATUS_OK);
    expect_status(vlcc_estimate_memory(c, VLCC_WORK_SEARCH, N, D, &sh, &sd), VLCC_STATUS_OK);
    expect(bh > (uint64_t)N * cs && sh > 0 && bd == 0 && sd == 0, "build and search estimates");
    expect_status(vlcc_estimate_memory(c, 7, N, D, &bh, &bd), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_estimate_memory(NULL, VLCC_WORK_TRAIN, N, D, &bh, &bd), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_estimate_memory(ix, VLCC_WORK_BUILD, N, NULL, &ah, &ad), VLCC_STATUS_OK);
    expect_status(vlcc_index_estimate_memory(ix, VLCC_WORK_SEARCH, 10, NULL, &qh, &qd), VLCC_STATUS_OK);
    expect(ah > (uint64_t)N * 8 && qh > 0 && ad == 0 && qd == 0, "index estimates");
    expect_status(vlcc_index_estimate_memory(ix, VLCC_WORK_TRAIN, N, NULL, &ah, &ad), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_index_estimate_memory(ix, VLCC_WORK_SEARCH, 10, NULL, NULL, &qd), VLCC_STATUS_NULL_POINTER);
    vlcc_buffer full = {NULL, 0};
    expect_status(vlcc_index_serialize(ix, &full), VLCC_STATUS_OK);
    expect_status(vlcc_context_set_memory_cap(ctx, (size_t)(ah / 2)), VLCC_STATUS_OK);
    expect_status(vlcc_index_add(ix, x, N, ids), VLCC_STATUS_OUT_OF_MEMORY);
    /* Serializing counts against the cap too: lifted while the index is compared. */
    vlcc_buffer none = {NULL, 0};
    expect_status(vlcc_index_serialize(ix, &none), VLCC_STATUS_OUT_OF_MEMORY);
    expect_status(vlcc_context_set_memory_cap(ctx, 0), VLCC_STATUS_OK);
    expect(serialized_equal(ix, &full), "a refused add leaves the index");
    expect_status(vlcc_context_set_memory_cap(ctx, 64), VLCC_STATUS_OK);
    expect_status(vlcc_index_merge(ix, other), VLCC_STATUS_OUT_OF_MEMORY);
    expect_status(vlcc_context_set_memory_cap(ctx, 0), VLCC_STATUS_OK);
    expect(serialized_equal(ix, &full), "a refused merge leaves the index");
    expect_status(vlcc_context_set_memory_cap(ctx, 64), VLCC_STATUS_OK);
    vlcc_search_params *sp = NULL;
    expect_status(vlcc_search_params_new(&sp), VLCC_STATUS_OK);
    uint64_t got_ids[10 * 10], want_ids[10 * 10];
    float got_d[10 * 10], want_d[10 * 10];
    expect_status(vlcc_index_search(ix, x, 10, sp, NULL, 0, got_ids, got_d), VLCC_STATUS_OUT_OF_MEMORY);
    /* A byte short of its estimate, the search has no room for its tables and goes without
       them: the same results. */
    expect_status(vlcc_context_set_memory_cap(ctx, (size_t)(qh - 1)), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, x, 10, sp, NULL, 0, got_ids, got_d), VLCC_STATUS_OK);
    vlcc_index_memory mem;
    expect_status(vlcc_index_memory_usage(ix, &mem), VLCC_STATUS_OK);
    expect(mem.search_tables == 0, "no tables built under the cap");
    expect_status(vlcc_context_set_memory_cap(ctx, 0), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, x, 10, sp, NULL, 0, want_ids, want_d), VLCC_STATUS_OK);
    expect(memcmp(got_ids, want_ids, sizeof want_ids) == 0 && memcmp(got_d, want_d, sizeof want_d) == 0,
           "a search without its tables gives the same results");
    vlcc_search_params_free(sp);
    vlcc_buffer_free(&full);
    vlcc_buffer_free(&before);
    vlcc_index_free(other);
    vlcc_index_free(ix);
    vlcc_compressor_free(c);
}

/* Cancels a search at its first report, or (sleep_ms > 0) sleeps at each report so that a
 * deadline of a millisecond passes. */
typedef struct {
    int reports, sleep_ms, went_back;
    uint64_t last_done, total;
} search_log;

static int log_search(void *user, vlcc_phase phase, uint64_t done, uint64_t total) {
    search_log *l = user;
    if (phase != VLCC_PHASE_SEARCH || done > total || done < l->last_done) l->went_back++;
    l->last_done = done;
    l->total = total;
    l->reports++;
    if (l->sleep_ms == 0) return 1;
    struct timespec t = {0, (long)l->sleep_ms * 1000000L};
    nanosleep(&t, NULL);
    return 0;
}

/* Searches (top-k, bounds, range) under a progress callback that cancels and under
 * deadlines: CANCELLED or TIMED_OUT, with nothing written. */
static void test_search_control(vlcc_context *ctx, const float *x) {
    enum { Q = 512 };
    vlcc_compressor *c = trained(ctx, x, 9);
    vlcc_index *ix = NULL;
    expect_status(vlcc_index_new_with_refine(c, VLCC_REFINE_BOUND, &ix), VLCC_STATUS_OK);
    uint64_t ids[N];
    for (size_t i = 0; i < N; i++) ids[i] = i;
    expect_status(vlcc_index_add(ix, x, N, ids), VLCC_STATUS_OK);
    float *q = malloc(sizeof(float) * Q * D);
    for (size_t i = 0; i < Q; i++) memcpy(q + i * D, x + (i % N) * D, sizeof(float) * D);
    vlcc_search_params *sp = NULL;
    expect_status(vlcc_search_params_new(&sp), VLCC_STATUS_OK);
    uint64_t *out_ids = malloc(sizeof(uint64_t) * Q * K);
    float *out_d = malloc(sizeof(float) * Q * K);
    memset(out_ids, 0xAB, sizeof(uint64_t) * Q * K);
    memset(out_d, 0xAB, sizeof(float) * Q * K);
    double v = -1;
    expect_status(vlcc_search_params_get(sp, VLCC_SEARCH_PARAM_TIMEOUT_MS, &v), VLCC_STATUS_OK);
    expect(v == 0, "no search timeout by default");
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_TIMEOUT_MS, -1), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_TIMEOUT_MS, 0.5), VLCC_STATUS_INVALID_ARGUMENT);
    expect_status(vlcc_search_params_set_progress(NULL, log_search, NULL), VLCC_STATUS_NULL_POINTER);

    /* Cancelled at the first report: top-k, bounds, range. */
    search_log l = {0, 0, 0, 0, 0};
    expect_status(vlcc_search_params_set_progress(sp, log_search, &l), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, Q, sp, NULL, 0, out_ids, out_d), VLCC_STATUS_CANCELLED);
    expect(l.reports == 1 && l.went_back == 0 && l.total == Q, "one report, in queries");
    float *lo = malloc(sizeof(float) * Q * K);
    expect_status(vlcc_index_search_bounds(ix, q, Q, sp, NULL, 0, out_ids, out_d, lo, NULL, NULL, NULL),
                  VLCC_STATUS_CANCELLED);
    vlcc_range_results *rr = NULL;
    expect_status(vlcc_index_range_search(ix, q, Q, sp, 1e30f, NULL, 0, &rr), VLCC_STATUS_CANCELLED);
    expect(rr == NULL, "no range results when cancelled");
    int untouched = 1;
    for (size_t i = 0; i < Q * K; i++) untouched &= out_ids[i] == 0xABABABABABABABABull;
    expect(untouched, "a cancelled search writes nothing");

    /* A millisecond's deadline, passed while the callback sleeps: TIMED_OUT. */
    search_log slow = {0, 5, 0, 0, 0};
    expect_status(vlcc_search_params_set_progress(sp, log_search, &slow), VLCC_STATUS_OK);
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_TIMEOUT_MS, 1), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, Q, sp, NULL, 0, out_ids, out_d), VLCC_STATUS_TIMED_OUT);
    expect_status(vlcc_index_range_search(ix, q, Q, sp, 1e30f, NULL, 0, &rr), VLCC_STATUS_TIMED_OUT);
    for (size_t i = 0; i < Q * K; i++) untouched &= out_ids[i] == 0xABABABABABABABABull;
    expect(untouched, "a search past its deadline writes nothing");
    /* The context's timeout, when the search sets none. */
    expect_status(vlcc_search_params_set(sp, VLCC_SEARCH_PARAM_TIMEOUT_MS, 0), VLCC_STATUS_OK);
    expect_status(vlcc_context_set_timeout(NULL, 1), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_context_set_timeout(ctx, 1), VLCC_STATUS_OK);
    uint64_t ms = 0;
    expect_status(vlcc_context_timeout(ctx, &ms), VLCC_STATUS_OK);
    expect(ms == 1, "the context's timeout");
    expect_status(vlcc_index_search(ix, q, Q, sp, NULL, 0, out_ids, out_d), VLCC_STATUS_TIMED_OUT);
    expect_status(vlcc_context_set_timeout(ctx, 0), VLCC_STATUS_OK);
    /* Without the callback the search ends, and its reports went nowhere. */
    expect_status(vlcc_search_params_set_progress(sp, NULL, NULL), VLCC_STATUS_OK);
    expect_status(vlcc_index_search(ix, q, Q, sp, NULL, 0, out_ids, out_d), VLCC_STATUS_OK);
    expect(out_ids[0] != 0xABABABABABABABABull, "a search that ends writes its results");
    /* Its run report: the CPU, nothing fallen back; a refused call leaves none. */
    vlcc_run_report rep = {99, 99};
    expect_status(vlcc_last_run_report(&rep), VLCC_STATUS_OK);
    expect(rep.backend == VLCC_BACKEND_CPU && rep.fallbacks == 0, "a CPU search reports the CPU");
    expect_status(vlcc_last_run_report(NULL), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_index_search(ix, q, Q, NULL, NULL, 0, NULL, out_d), VLCC_STATUS_NULL_POINTER);
    expect_status(vlcc_last_run_report(&rep), VLCC_STATUS_INVALID_STATE);
    expect(strcmp(vlcc_fallback_str(VLCC_FALLBACK_PREDICATE_FILTER), "predicate_filter") == 0 &&
               strcmp(vlcc_fallback_str(VLCC_FALLBACK_NO_RANGE_SCAN), "no_range_scan") == 0 &&
               strcmp(vlcc_fallback_str(3), "unknown") == 0,
           "fallback names");
    free(lo);
    free(out_d);
    free(out_ids);
    free(q);
    vlcc_search_params_free(sp);
    vlcc_index_free(ix);
    vlcc_compressor_free(c);
}

/* Counts VERIFY reports and answers `stop` (non-zero cancels). */
typedef struct {
    uint64_t reports, last_done, total;
    int stop;
} verify_log;

static int log_verify(void *user, vlcc_phase phase, uint64_t done, uint64_t total) {
    verify_log *l = user;
    if (phase != VLCC_PHASE_VERIFY || done > total) l->total = UINT64_MAX;
    else l->total = total;
    l->last_done = done;
    l->reports++;
    return l->stop;
}

/* Loads and verifies watched: checksums reported in bytes up to the file's size, a cancel
 * makes no index, a deferred load's verify reports and cancels too. */
static void test_load_control(vlcc_context *ctx, const float *x, const char *dir) {
    vlcc_compressor *c = trained(ctx, x, 10);
    vlcc_index *ix = NULL;
    expect_status(vlcc_index_new(c, &ix), VLCC_STATUS_OK);
    uint64_t ids[N];
    for (size_t i = 0; i < N; i++) ids[i] = i;
    expect_status(vlcc_index_add(ix, x, N, ids), VLCC_STATUS_OK);
    char path[4096];
    snprintf(path, sizeof path, "%s/harness-watched.vlcc", dir);
    expect_status(vlcc_index_save(ix, path), VLCC_STATUS_OK);
    verify_log l = {0, 0, 0, 0};
    vlcc_index *loaded = NULL;
    expect_status(vlcc_index_load_watched(ctx, path, VLCC_LOAD_FLAG_MMAP, log_verify, &l, 0, &loaded),
                  VLCC_STATUS_OK);
    expect(loaded != NULL && l.reports > 0 && l.total != UINT64_MAX && l.last_done == l.total,
           "a watched load reports its checksums to the file's end");
    vlcc_index *none = NULL;
    l.stop = 1;
    expect_status(vlcc_index_load_watched(ctx, path, VLCC_LOAD_FLAG_MMAP, log_verify, &l, 0, &none),
                  VLCC_STATUS_CANCELLED);
    expect(none == NULL, "a cancelled load makes no index");
    expect_status(vlcc_index_load_watched(NULL, path, 0, NULL, NULL, 0, &none), VLCC_STATUS_NULL_POINTER);
    vlcc_index *deferred = NULL;
    expect_status(vlcc_index_load_watched(ctx, path, VLCC_LOAD_FLAG_MMAP | VLCC_LOAD_FLAG_DEFER_CHECKSUMS, NULL,
                                          NULL, 0, &deferred),
                  VLCC_STATUS_OK);
    l.stop = 0;
    l.reports = 0;
    expect_status(vlcc_index_verify_watched(deferred, log_verify, &l, 0), VLCC_STATUS_OK);
    expect(l.reports > 0 && l.last_done == l.total, "a watched verify reports");
    l.stop = 1;
    expect_status(vlcc_index_verify_watched(deferred, log_verify, &l, 0), VLCC_STATUS_CANCELLED);
    expect_status(vlcc_index_verify_watched(NULL, NULL, NULL, 0), VLCC_STATUS_NULL_POINTER);
    remove(path);
    vlcc_index_free(deferred);
    vlcc_index_free(loaded);
    vlcc_index_free(ix);
    vlcc_compressor_free(c);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    float *x = clustered(N, 3);
    test_versions_and_statuses();
    test_context();
    vlcc_context *ctx = NULL;
    expect_status(vlcc_context_new(VLCC_BACKEND_CPU, 0, 2, &ctx), VLCC_STATUS_OK);
    test_compressor(ctx, x);
    test_index(ctx, x, dir);
    test_filters_and_ids(ctx, x);
    test_progress_and_cancel(ctx, x);
    test_search_control(ctx, x);
    test_load_control(ctx, x, dir);
    /* Round trip: train -> encode -> search -> save -> load -> search, all identical above. */
    vlcc_context_free(ctx);
    free(x);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures == 0 ? 0 : 1;
}
