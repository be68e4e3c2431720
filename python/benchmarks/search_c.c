/* Times vlcc_index_search on an index file and raw float32 queries: the C side of
 * search_vs_c.py. Usage: search_c INDEX QUERIES D K NPROBE REPS; prints the median QPS. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "vlc_compress.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: search_c INDEX QUERIES D K NPROBE REPS\n");
        return 2;
    }
    size_t d = strtoul(argv[3], NULL, 10), k = strtoul(argv[4], NULL, 10);
    size_t nprobe = strtoul(argv[5], NULL, 10), reps = strtoul(argv[6], NULL, 10);
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    size_t nq = (size_t)ftell(f) / (4 * d);
    fseek(f, 0, SEEK_SET);
    float *q = malloc(nq * d * 4);
    if (fread(q, 4, nq * d, f) != nq * d) return 1;
    fclose(f);
    vlcc_context *ctx = NULL;
    vlcc_index *ix = NULL;
    vlcc_search_params *p = NULL;
    if (vlcc_context_new(VLCC_BACKEND_CPU, 0, 0, &ctx) || vlcc_index_load(ctx, argv[1], 0, &ix) ||
        vlcc_search_params_new(&p) || vlcc_search_params_set(p, VLCC_SEARCH_PARAM_K, (double)k) ||
        vlcc_search_params_set(p, VLCC_SEARCH_PARAM_NPROBE, (double)nprobe)) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    uint64_t *ids = malloc(nq * k * 8);
    float *dist = malloc(nq * k * 4);
    double *qps = malloc(reps * sizeof(double));
    vlcc_index_search(ix, q, nq, p, NULL, 0, ids, dist); /* first search builds the tables */
    for (size_t r = 0; r < reps; r++) {
        double t = now();
        if (vlcc_index_search(ix, q, nq, p, NULL, 0, ids, dist)) return 1;
        qps[r] = nq / (now() - t);
    }
    qsort(qps, reps, sizeof(double), cmp);
    printf("%.1f\n", qps[reps / 2]);
    vlcc_search_params_free(p);
    vlcc_index_free(ix);
    vlcc_context_free(ctx);
    return 0;
}
