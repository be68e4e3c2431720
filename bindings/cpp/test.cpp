// Tests of the C++ wrapper: every handle and call, the errors it throws, partial rows, progress
// and cancel, filters, re-rank, bounds, files and bytes, the C handles. Run by scripts/test.sh
// as C++17 and C++20, plain and under ASan/UBSan, and through the installed CMake target.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "vlc_compress.hpp"

namespace {

int failures = 0;

#define EXPECT(cond)                                                          \
    do {                                                                      \
        if (!(cond)) {                                                        \
            std::fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                       \
        }                                                                     \
    } while (0)

// Runs `f` and expects it to throw vlcc::Error with `status`.
template <class F>
void expect_status(vlcc_status status, F f, int line) {
    try {
        f();
        std::fprintf(stderr, "line %d: no error, expected %s\n", line, vlcc_status_str(status));
        failures++;
    } catch (const vlcc::Error& e) {
        if (e.status() != status) {
            std::fprintf(stderr, "line %d: %s, expected %s\n", line, e.what(), vlcc_status_str(status));
            failures++;
        }
    }
}
#define EXPECT_STATUS(status, ...) expect_status(status, [&] { __VA_ARGS__; }, __LINE__)

const size_t n = 4000, d = 16;

std::vector<float> data() {
    std::vector<float> x(n * d);
    uint64_t s = 42;
    for (size_t i = 0; i < x.size(); i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = static_cast<float>((s >> 40) % 1000) / 100.0f + static_cast<float>(i / d % 20);
    }
    return x;
}

std::vector<uint64_t> iota(size_t count, uint64_t from = 0) {
    std::vector<uint64_t> v(count);
    for (size_t i = 0; i < count; i++) v[i] = from + i;
    return v;
}

vlcc::Compressor trained(const vlcc::Context& ctx, const std::vector<float>& x, double seed = 1) {
    vlcc::Compressor c(ctx);
    c.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8).set(VLCC_PARAM_SEED, seed);
    c.train(x, d);
    return c;
}

void versions_and_params() {
    EXPECT(std::string(vlcc::version()) == VLCC_VERSION_STRING);
    EXPECT(vlcc::abi_version() == VLCC_ABI_VERSION);
    const auto b = vlcc::param_bounds(VLCC_PARAM_BITS);
    EXPECT(b.min == 4 && b.max == 8 && b.whole);
    vlcc::Context ctx(VLCC_BACKEND_CPU, 0, 2);
    EXPECT(ctx.backend() == VLCC_BACKEND_CPU && ctx.threads() == 2);
    vlcc::Compressor c(ctx);
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, c.set(VLCC_PARAM_BITS, 5.5));
    EXPECT_STATUS(VLCC_STATUS_INVALID_STATE, c.encode(std::vector<float>(d)));
}

// An error level in each code's last byte: the same code size, another codebook, a search that
// finds each vector; with inner product it is refused.
void error_code(const vlcc::Context& ctx, const std::vector<float>& x) {
    vlcc::Compressor on(ctx), off(ctx);
    on.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8).set(VLCC_PARAM_ERROR_CODE, 2);
    off.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8).set(VLCC_PARAM_ERROR_CODE, 1);
    on.train(x, d);
    off.train(x, d);
    EXPECT(on.codec_size() == off.codec_size() && on.fingerprint() != off.fingerprint());
    vlcc::Index ix(on);
    ix.add(x, iota(n));
    const auto r = ix.search(vlcc::span<const float>(x).subspan(0, 20 * d), 5, 32);
    size_t self = 0;
    for (size_t i = 0; i < 20; i++)
        for (size_t t = 0; t < 5; t++) self += r.ids[i * 5 + t] == i;
    EXPECT(self >= 16);
    vlcc::Compressor ip(ctx);
    ip.set(VLCC_PARAM_METRIC, VLCC_METRIC_INNER_PRODUCT);
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, ip.set(VLCC_PARAM_ERROR_CODE, 2));
}

void codec(const vlcc::Context& ctx, const std::vector<float>& x) {
    vlcc::Compressor c = trained(ctx, x);
    const auto codes = c.encode(x);
    EXPECT(c.dim() == d && codes.size() == n * c.codec_size());
    const auto y = c.decode(codes);
    double err = 0, spread = 0;
    for (size_t i = 0; i < x.size(); i++) {
        err += (x[i] - y[i]) * (x[i] - y[i]);
        spread += (x[i] - 10) * (x[i] - 10);
    }
    EXPECT(err < 0.5 * spread);
    // A partial row is refused, never dropped; an output of the wrong size too.
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, c.encode(vlcc::span<const float>(x).subspan(0, d + 3)));
    std::vector<uint8_t> small(c.codec_size());
    EXPECT_STATUS(VLCC_STATUS_BUFFER_TOO_SMALL, c.encode_into(vlcc::span<const float>(x).subspan(0, 2 * d), small));
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, c.decode(std::vector<uint8_t>(c.codec_size() + 1)));
    std::vector<float> bad(x.begin(), x.begin() + d);
    bad[3] = NAN;
    EXPECT_STATUS(VLCC_STATUS_NON_FINITE, c.encode(bad));
    // The codebook as bytes, and its fingerprint.
    vlcc::Compressor back = vlcc::Compressor::deserialize_codebook(ctx, c.serialize_codebook());
    EXPECT(back.fingerprint() == c.fingerprint() && back.encode(x) == codes);
    EXPECT_STATUS(VLCC_STATUS_CORRUPT, vlcc::Compressor::deserialize_codebook(ctx, std::vector<uint8_t>(64, 7)));
    // The C handle, for calls the wrapper does not cover.
    size_t size = 0;
    EXPECT(vlcc_compressor_codec_size(c.get(), &size) == VLCC_STATUS_OK && size == c.codec_size());
}

void memory_budget(const std::vector<float>& x) {
    vlcc::Context ctx(VLCC_BACKEND_CPU, 0, 2);
    vlcc::Compressor c(ctx);
    c.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8);
    const auto est = c.estimate_memory(n, d);
    EXPECT(est.first > x.size() * sizeof(float));
    ctx.set_device_memory_cap(1);  // nothing to cap on the CPU backend
    ctx.set_memory_cap(est.first / 50);  // far under even a tiled training's needs
    EXPECT_STATUS(VLCC_STATUS_OUT_OF_MEMORY, c.train(x, d));
    EXPECT_STATUS(VLCC_STATUS_INVALID_STATE, c.encode(x));

    // Adds and searches answer to the cap: an add past it is refused and leaves the index; a
    // search without room for its tables goes without them, with the same results.
    ctx.set_memory_cap(0);
    c.train(x, d);
    const auto build = c.estimate_memory(VLCC_WORK_BUILD, n, d);
    EXPECT(build.first > n * 8 && build.second == 0);
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, c.estimate_memory(static_cast<vlcc_work>(9), n, d));
    vlcc::Index ix(c);
    ix.add(x, iota(n));
    const vlcc::SearchParams p(10, 16);
    const auto add = ix.estimate_memory(VLCC_WORK_BUILD, n);
    const auto search = ix.estimate_memory(VLCC_WORK_SEARCH, 10, &p);
    EXPECT(add.first > n * 8 && search.first > 0);
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, ix.estimate_memory(VLCC_WORK_TRAIN, n));
    ctx.set_memory_cap(add.first / 2);
    EXPECT_STATUS(VLCC_STATUS_OUT_OF_MEMORY, ix.add(x, iota(n, n)));
    EXPECT(ix.size() == n);
    const auto q = vlcc::span<const float>(x).subspan(0, 10 * d);
    ctx.set_memory_cap(search.first - 1);
    const auto capped = ix.search(q, p);
    EXPECT(ix.memory_usage().search_tables == 0);
    ctx.set_memory_cap(0);
    const auto uncapped = ix.search(q, p);
    EXPECT(capped.ids == uncapped.ids && capped.distances == uncapped.distances);
    // Queries rotated in f32 products: at this width they are anyway, so the same results.
    ctx.set_exact_rotation(true);
    const auto exact = ix.search(q, p);
    EXPECT(exact.ids == uncapped.ids && exact.distances == uncapped.distances);
    ctx.set_exact_rotation(false);
}

void progress_and_cancel(const vlcc::Context& ctx, const std::vector<float>& x) {
    std::set<int> phases;
    vlcc::Compressor c(ctx);
    c.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8);
    c.train(x, d, [&](vlcc_phase p, uint64_t done, uint64_t total) {
        EXPECT(done <= total);
        phases.insert(static_cast<int>(p));
        return true;
    });
    EXPECT(phases.count(VLCC_PHASE_ANCHORS) && phases.count(VLCC_PHASE_CODEBOOKS));
    vlcc::Compressor stopped(ctx);
    stopped.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8);
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, stopped.train(x, d, [](vlcc_phase, uint64_t, uint64_t) { return false; }));
    EXPECT_STATUS(VLCC_STATUS_INVALID_STATE, stopped.encode(x));
    // An exception in the callback cancels as well.
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, stopped.train(x, d, [](vlcc_phase, uint64_t, uint64_t) -> bool {
        throw std::runtime_error("stop");
    }));
    vlcc::Index ix(c);
    ix.add(vlcc::span<const float>(x).subspan(0, 100 * d), iota(100));
    const auto before = ix.serialize();
    EXPECT_STATUS(VLCC_STATUS_CANCELLED,
                  ix.add(x, iota(n, 100), [](vlcc_phase, uint64_t done, uint64_t) { return done == 0; }));
    vlcc::Index other(c);
    other.add(vlcc::span<const float>(x).subspan(0, 10 * d), iota(10, 50000));
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, ix.merge(other, [](vlcc_phase, uint64_t, uint64_t) { return false; }));
    EXPECT(ix.serialize() == before);
    ix.set_progress([](vlcc_phase, uint64_t, uint64_t) { return false; });
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, ix.add(vlcc::span<const float>(x).subspan(0, d), iota(1, 7000)));
    ix.set_progress(nullptr);
    ix.add(vlcc::span<const float>(x).subspan(0, d), iota(1, 7000));
    EXPECT(ix.size() == 101);
}

void index_calls(const vlcc::Context& ctx, const std::vector<float>& x, const std::string& dir) {
    vlcc::Compressor c = trained(ctx, x);
    vlcc::Index ix(c);
    ix.add(x, iota(n));
    EXPECT(ix.size() == n && ix.dim() == d);
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, ix.add(vlcc::span<const float>(x).subspan(0, d), iota(2)));
    const auto q = vlcc::span<const float>(x).subspan(0, 20 * d);
    const auto r = ix.search(q, 5, 32);
    EXPECT(r.ids.size() == 100 && r.found(0) == 5);
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, ix.search(vlcc::span<const float>(x).subspan(0, d - 1), 5, 8));
    // Re-rank against the caller's rows, or fetched rows: the same, exact.
    const auto rr = ix.search(q, 5, 32, 50, x);
    vlcc::SearchParams fp(5, 32, 50);
    fp.fetch([&](vlcc::span<const uint64_t> ids, vlcc::span<float> out) {
        for (size_t i = 0; i < ids.size(); i++)
            for (size_t t = 0; t < d; t++) out[i * d + t] = x[ids[i] * d + t];
    }, d);
    const auto rf = ix.search(q, fp);
    EXPECT(rr.ids == rf.ids && rr.distances == rf.distances);
    for (size_t i = 0; i < 20; i++) EXPECT(rr.ids[i * 5] == i && rr.distances[i * 5] == 0.0f);
    // Filters: ids, bitset, callable.
    std::vector<uint64_t> even;
    for (uint64_t i = 0; i < n; i += 2) even.push_back(i);
    std::vector<uint8_t> bits(n / 8, 0x55);
    for (int kind = 0; kind < 3; kind++) {
        vlcc::SearchParams p(5, 32);
        if (kind == 0) p.filter_ids(even);
        if (kind == 1) p.filter_bitset(bits, n);
        if (kind == 2) p.filter([](uint64_t id) { return id % 2 == 0; });
        const auto f = ix.search(q, p);
        for (size_t s = 0; s < f.ids.size(); s++) EXPECT(f.ids[s] == VLCC_NO_ID || f.ids[s] % 2 == 0);
    }
    // Range search, remove, contains, reconstruct, codes.
    const auto range = ix.range_search(q, r.distances[4] + 1e-3f, vlcc::SearchParams(1, 32));
    EXPECT(range.offsets.size() == 21 && range.offsets[1] >= 5);
    EXPECT(ix.remove(iota(10)) == 10 && ix.size() == n - 10);
    const auto has = ix.contains(std::vector<uint64_t>{3, 30});
    EXPECT(!has[0] && has[1]);
    EXPECT(ix.reconstruct(std::vector<uint64_t>{30}) == c.decode(ix.codes(std::vector<uint64_t>{30})));
    EXPECT_STATUS(VLCC_STATUS_INVALID_ARGUMENT, ix.reconstruct(std::vector<uint64_t>{3}));
    // Bounds: an index with error bounds; auto re-rank certifies.
    vlcc::Index bounded(c, VLCC_REFINE_BOUND);
    bounded.add(x, iota(n));
    vlcc::SearchParams bp(5, 8, 400);
    bp.rerank_auto(true);
    const auto b = bounded.search_bounds(q, bp, x);
    size_t certified = 0;
    for (auto v : b.certified) certified += v;
    EXPECT(certified >= 10);
    EXPECT_STATUS(VLCC_STATUS_INVALID_STATE, ix.search_bounds(q, vlcc::SearchParams(5, 8)));
    // Merge, and a codebook mismatch.
    vlcc::Index a(c), more(c);
    a.add(vlcc::span<const float>(x).subspan(0, 100 * d), iota(100));
    more.add(vlcc::span<const float>(x).subspan(100 * d, 100 * d), iota(100, 100));
    a.merge(more);
    EXPECT(a.size() == 200 && more.size() == 100);
    vlcc::Compressor other = trained(ctx, x, 7);
    vlcc::Index foreign(other);
    EXPECT_STATUS(VLCC_STATUS_CODEBOOK_MISMATCH, a.merge(foreign));
    // Files and bytes: saved, loaded mapped and deferred, deserialized: the same results.
    const std::string path = dir + "/cpp-test.vlcc";
    ix.save(path);
    vlcc::Index loaded = vlcc::Index::load(ctx, path);
    vlcc::Index deferred = vlcc::Index::load_deferred(ctx, path);
    deferred.verify();
    vlcc::Index copy = vlcc::Index::deserialize(ctx, ix.serialize());
    const auto want = ix.search(q, 5, 32);
    for (const vlcc::Index* other_ix : {&loaded, &deferred, &copy}) {
        const auto got = other_ix->search(q, 5, 32);
        EXPECT(got.ids == want.ids && got.distances == want.distances);
    }
    EXPECT(loaded.stats().vectors == n - 10 && loaded.memory_usage().codes == (n - 10) * 8);
    EXPECT_STATUS(VLCC_STATUS_IO, vlcc::Index::load(ctx, dir + "/missing.vlcc"));
    EXPECT_STATUS(VLCC_STATUS_CORRUPT, vlcc::Index::deserialize(ctx, std::vector<uint8_t>(100, 1)));
    std::remove(path.c_str());
    // The C handle.
    size_t size = 0;
    EXPECT(vlcc_index_size(ix.get(), &size) == VLCC_STATUS_OK && size == ix.size());
    // Moved-from handles are empty; the moved-to one works.
    vlcc::Index moved = std::move(copy);
    EXPECT(moved.size() == n - 10);
}

// Searches, range searches, loads and verifies stop at a cancel or past their timeout, with
// CANCELLED or TIMED_OUT, and report what they did.
void search_control(const vlcc::Context& ctx, const std::vector<float>& x, const std::string& dir) {
    using std::chrono::milliseconds;
    vlcc::Compressor c = trained(ctx, x);
    vlcc::Index ix(c);
    ix.add(x, iota(n));
    const auto q = vlcc::span<const float>(x);
    vlcc::SearchParams p(5, 32);
    uint64_t last = 0;
    p.progress([&](vlcc_phase ph, uint64_t done, uint64_t total) {
        EXPECT(ph == VLCC_PHASE_SEARCH && done <= total && total == n && done >= last);
        last = done;
        return true;
    });
    EXPECT(ix.search(q, p).ids == ix.search(q, 5, 32).ids && last == n);
    p.progress([](vlcc_phase, uint64_t, uint64_t) { return false; });
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, ix.search(q, p));
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, ix.range_search(q, 1e30f, p));
    p.progress([](vlcc_phase, uint64_t, uint64_t) -> bool { throw std::runtime_error("stop"); });
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, ix.search(q, p));
    // A callback slow enough that a millisecond's timeout passes.
    p.progress([](vlcc_phase, uint64_t, uint64_t) {
        auto until = std::chrono::steady_clock::now() + milliseconds(3);
        while (std::chrono::steady_clock::now() < until) {
        }
        return true;
    });
    p.timeout(milliseconds(1));
    EXPECT(p.get(VLCC_SEARCH_PARAM_TIMEOUT_MS) == 1);
    EXPECT_STATUS(VLCC_STATUS_TIMED_OUT, ix.search(q, p));
    p.progress(nullptr).timeout(milliseconds(0));
    EXPECT(ix.search(q, p).ids.size() == n * 5);
    // Where it ran: the CPU, nothing fallen back.
    const vlcc_run_report rep = vlcc::last_run_report();
    EXPECT(rep.backend == VLCC_BACKEND_CPU && rep.fallbacks == 0);
    EXPECT(vlcc::fallback_names(VLCC_FALLBACK_PREDICATE_FILTER | VLCC_FALLBACK_DEVICE_DECLINED) ==
           "predicate_filter|device_declined");
    // The context's timeout, for calls without their own.
    vlcc::Context timed(VLCC_BACKEND_CPU, 0, 2);
    timed.set_timeout(milliseconds(250));
    EXPECT(timed.timeout() == milliseconds(250));
    timed.set_timeout(milliseconds(0));
    // Loads and verifies: checksums in pieces, a cancel stops them.
    const std::string path = dir + "/cpp-control.vlcc";
    ix.save(path);
    uint64_t checked = 0;
    auto count = [&](vlcc_phase ph, uint64_t done, uint64_t) {
        EXPECT(ph == VLCC_PHASE_VERIFY);
        checked = done;
        return true;
    };
    vlcc::Index loaded = vlcc::Index::load(ctx, path, VLCC_LOAD_FLAG_MMAP, count);
    EXPECT(checked > 0 && loaded.size() == n);
    auto stop = [](vlcc_phase, uint64_t, uint64_t) { return false; };
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, vlcc::Index::load(ctx, path, VLCC_LOAD_FLAG_MMAP, stop));
    vlcc::Index deferred =
        vlcc::Index::load(ctx, path, VLCC_LOAD_FLAG_MMAP | VLCC_LOAD_FLAG_DEFER_CHECKSUMS, vlcc::ProgressFn());
    checked = 0;
    deferred.verify(count);
    EXPECT(checked > 0);
    EXPECT_STATUS(VLCC_STATUS_CANCELLED, deferred.verify(stop));
    std::remove(path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";
    const auto x = data();
    vlcc::Context ctx(VLCC_BACKEND_CPU, 0, 2);
    try {
        versions_and_params();
        codec(ctx, x);
        error_code(ctx, x);
        memory_budget(x);
        progress_and_cancel(ctx, x);
        index_calls(ctx, x, dir);
        search_control(ctx, x, dir);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "unexpected exception: %s\n", e.what());
        return 1;
    }
    if (failures) {
        std::fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    std::printf("c++ wrapper tests: all passed\n");
    return 0;
}
