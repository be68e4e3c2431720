// Builds an index with the C++ wrapper, searches it, saves and reloads it, and checks an error.
// Compiled as C++17 and C++20 with -Wall -Wextra -Wpedantic -Werror (and under ASan) by
// scripts/test.sh.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "vlc_compress.hpp"

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";
    const size_t n = 5000, d = 32;
    std::vector<float> x(n * d);
    for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>((i * 7919 % 1009) % 97) / 10.0f + (i / d % 10);

    vlcc::Context ctx(VLCC_BACKEND_CPU, 0, 2);
    vlcc::Compressor comp(ctx);
    // Each parameter's range and default come from the library.
    const vlcc::ParamBounds bpv = vlcc::param_bounds(VLCC_PARAM_BYTES_PER_VECTOR);
    if (bpv.min != 1 || bpv.max != 4096 || !bpv.whole || comp.get(VLCC_PARAM_BYTES_PER_VECTOR) != bpv.default_value) {
        std::fprintf(stderr, "unexpected bounds of bytes per vector\n");
        return 1;
    }
    comp.set(VLCC_PARAM_ANCHORS, 64).set(VLCC_PARAM_BYTES_PER_VECTOR, 8);
    comp.train(x, d);

    vlcc::Index index(comp);
    std::vector<uint64_t> ids(n);
    for (size_t i = 0; i < n; i++) ids[i] = i;
    index.add(x, ids);

    const vlcc::SearchParams sp(5, 16, 50);  // k, nprobe, re-rank depth
    auto r = index.search(vlcc::span<const float>(x).subspan(0, 10 * d), sp, x);
    int self = 0;
    for (size_t q = 0; q < 10; q++) self += r.ids[q * 5] == q && r.distances[q * 5] == 0.0f;

    const std::string path = dir + "/example.vlcc";
    index.save(path);
    vlcc::Index back = vlcc::Index::load(ctx, path);
    // A deferred load: codes' checksums on verify(); memory by part.
    const vlcc::Index lazy = vlcc::Index::load_deferred(ctx, path);
    lazy.verify();
    const bool lazy_ok = lazy.memory_usage().memory_mapped == 1 && lazy.memory_usage().search_tables == 0 &&
                         lazy.memory_usage().ids == 8 * n;
    auto again = back.search(vlcc::span<const float>(x).subspan(0, 10 * d), 5, 16, 50, x);

    bool caught = false;
    try {
        comp.set(VLCC_PARAM_BITS, 5);
    } catch (const vlcc::Error& e) {
        caught = e.status() == VLCC_STATUS_INVALID_ARGUMENT;
    }
    // Device input needs a CUDA context; this one runs on the CPU.
    try {
        comp.encode_device(x.data(), 10);
        caught = false;
    } catch (const vlcc::Error& e) {
        caught = caught && e.status() == VLCC_STATUS_BACKEND_UNAVAILABLE;
    }
    try {
        index.add_device(x.data(), vlcc::span<const uint64_t>(ids).subspan(0, 10));
        caught = false;
    } catch (const vlcc::Error& e) {
        caught = caught && e.status() == VLCC_STATUS_BACKEND_UNAVAILABLE && index.size() == n;
    }
    try {
        index.search_device_raw(vlcc::span<const float>(x).subspan(0, 10 * d), 5, 8, 20, x.data(), n);
        caught = false;
    } catch (const vlcc::Error& e) {
        caught = caught && e.status() == VLCC_STATUS_BACKEND_UNAVAILABLE;
    }
    // The codebook as bytes, and what a receiving process reads of it.
    const auto bytes = comp.serialize_codebook();
    vlcc::Compressor copy = vlcc::Compressor::deserialize_codebook(ctx, bytes);
    const bool same_codebook = copy.fingerprint() == comp.fingerprint() && copy.anchors() == comp.anchors() &&
                               comp.anchors().size() == 64 * d && comp.train_report().iterations > 0 &&
                               vlcc::abi_version() == VLCC_ABI_VERSION;
    // Small whole numbers are exact in f16: the same codes either way (0x3c00 = 1.0).
    const std::vector<float> ones(2 * d, 1.0f);
    const std::vector<uint16_t> ones16(2 * d, 0x3c00);
    caught = caught && same_codebook && comp.encode_f16(ones16) == comp.encode(ones);
    // The index as bytes, merged with an f16-built one, its stats and reconstruction.
    vlcc::Index copy_ix = vlcc::Index::deserialize(ctx, index.serialize());
    vlcc::Index halves(comp);
    const std::vector<uint64_t> half_ids{900001, 900002};
    halves.add_f16(ones16, half_ids);
    copy_ix.merge(halves);
    const vlcc_index_info st = copy_ix.stats();
    const auto [rec_ids, rec_vecs] = copy_ix.reconstruct();
    const bool lifecycle = st.vectors == n + 2 && st.dim == d && rec_ids.size() == n + 2 &&
                           rec_vecs.size() == (n + 2) * d && ctx.threads() == 2 &&
                           std::string(vlcc::version()) == VLCC_VERSION_STRING &&
                           vlcc::version_number() == VLCC_VERSION_NUMBER;
    caught = caught && lifecycle;
    // A partial last row is refused, never dropped.
    for (const auto& partial : {std::function<void()>([&] { comp.encode(vlcc::span<const float>(x).subspan(0, d + 1)); }),
                                std::function<void()>([&] { index.search(vlcc::span<const float>(x).subspan(0, 2 * d - 1), sp); }),
                                std::function<void()>([&] { comp.decode(vlcc::span<const uint8_t>(bytes).subspan(0, comp.codec_size() + 1)); })}) {
        try {
            partial();
            caught = false;
        } catch (const vlcc::Error& e) {
            caught = caught && e.status() == VLCC_STATUS_INVALID_ARGUMENT;
        }
    }
    // Filters through the parameters: a bitset (even ids), sorted ids (fewer than k: padded), a
    // callable (multiples of 3), one that throws (the search fails), and none again.
    vlcc::SearchParams fp(5, 64);
    const auto q10 = vlcc::span<const float>(x).subspan(0, 10 * d);
    const std::vector<uint8_t> evens(n / 8 + 1, 0x55);
    auto fr = index.search(q10, fp.filter_bitset(evens, n));
    bool filtered = true;
    for (const uint64_t id : fr.ids) filtered = filtered && id % 2 == 0;
    const std::vector<uint64_t> few{11, 12};
    fr = index.search(q10, fp.filter_ids(few));
    for (size_t q = 0; q < 10; q++) filtered = filtered && fr.found(q) == 2 && fr.ids[q * 5 + 2] == VLCC_NO_ID;
    fr = index.search(q10, fp.filter([](uint64_t id) { return id % 3 == 0; }));
    for (const uint64_t id : fr.ids) filtered = filtered && id % 3 == 0;
    try {
        index.search(q10, fp.filter([](uint64_t) -> bool { throw std::runtime_error("no"); }));
        filtered = false;
    } catch (const vlcc::Error& e) {
        filtered = filtered && e.status() == VLCC_STATUS_CALLBACK_FAILED;
    }
    filtered = filtered && index.search(q10, fp.clear_filter()).ids == index.search(q10, vlcc::SearchParams(5, 64)).ids;
    // By id: contains, approximate vectors, codes that decode to them; removal through the id map.
    const std::vector<uint64_t> some{3, 4}, absent{n + 1};
    const auto has = index.contains(std::vector<uint64_t>{3, n + 1});
    filtered = filtered && has[0] && !has[1] && index.codes(some).size() == 2 * index.codec_size() &&
               comp.decode(index.codes(some)) == index.reconstruct(some);
    try {
        index.reconstruct(absent);
        filtered = false;
    } catch (const vlcc::Error& e) {
        filtered = filtered && e.status() == VLCC_STATUS_INVALID_ARGUMENT;
    }
    // Range search: within the radius of a top-5's last hit, nearest first.
    const auto top = index.search(q10, vlcc::SearchParams(5, 64));
    const auto within = index.range_search(q10, top.distances[4], vlcc::SearchParams(5, 64));
    filtered = filtered && within.offsets.size() == 11 && within.offsets[1] >= 5 && within.ids[0] == top.ids[0];
    // Re-rank through a fetch callable: the same as against the dense rows.
    vlcc::SearchParams rp(5, 16, 30);
    const auto dense = index.search(q10, rp, x);
    rp.fetch([&](vlcc::span<const uint64_t> want, vlcc::span<float> out) {
        for (size_t i = 0; i < want.size(); i++)
            for (size_t t = 0; t < d; t++) out[i * d + t] = x[want[i] * d + t];
    }, d);
    const auto fetched = index.search(q10, rp);
    filtered = filtered && fetched.ids == dense.ids && fetched.distances == dense.distances;
    // Refinement vectors kept in the index: re-rank with nothing from the caller.
    vlcc::Index refined(comp, VLCC_REFINE_INT8);
    refined.add(x, ids);
    const vlcc::Index loaded = vlcc::Index::deserialize(ctx, refined.serialize());
    const auto by_refine = loaded.search(q10, vlcc::SearchParams(5, 16, 30));
    int near = 0;
    for (size_t q = 0; q < 10; q++) near += by_refine.ids[q * 5] == dense.ids[q * 5];
    filtered = filtered && loaded.refine() == VLCC_REFINE_INT8 && near >= 9;
    // The certified re-rank: exact over the probed lists, as re-ranking all of them is.
    const auto every = loaded.search(q10, vlcc::SearchParams(5, 16, n), x);
    const auto certain = loaded.search_bounds(q10, vlcc::SearchParams(5, 16, n).rerank_auto(true), x);
    filtered = filtered && certain.results.ids == every.ids && certain.certified[0] == 1 &&
               certain.reranked[0] > 0 && certain.lower[0] == certain.results.distances[0];
    caught = caught && filtered;
    // Progress and cancel: a cancelled call throws CANCELLED and changes nothing.
    bool cancelled = true;
    int heard = 0;
    ctx.set_progress([&](vlcc_phase, uint64_t, uint64_t) { return ++heard > 0; });
    vlcc::Compressor again_comp(ctx);
    again_comp.set(VLCC_PARAM_ANCHORS, 64).set(VLCC_PARAM_BYTES_PER_VECTOR, 8);
    again_comp.train(x, d);
    cancelled = cancelled && heard > 10;
    ctx.set_progress(nullptr);
    const uint64_t codebook = comp.fingerprint();
    auto expect_cancel = [&](auto call) {
        try {
            call();
            cancelled = false;
        } catch (const vlcc::Error& e) {
            cancelled = cancelled && e.status() == VLCC_STATUS_CANCELLED;
        }
    };
    int reports = 0;
    auto stop_in_codebooks = [&](vlcc_phase phase, uint64_t, uint64_t) {
        reports++;
        return phase != VLCC_PHASE_CODEBOOKS;
    };
    comp.set(VLCC_PARAM_SEED, 7);
    expect_cancel([&] { comp.train(x, d, stop_in_codebooks); });
    cancelled = cancelled && comp.fingerprint() == codebook && reports > 1;
    expect_cancel([&] { comp.encode(x, [](vlcc_phase, uint64_t, uint64_t) -> bool { throw 1; }); });
    const size_t held = index.size();
    const auto stop = [](vlcc_phase, uint64_t, uint64_t) { return false; };
    expect_cancel([&] { index.add(x, ids, stop); });
    vlcc::Index other(comp);
    other.add(vlcc::span<const float>(x).subspan(0, 100 * d), vlcc::span<const uint64_t>(ids).subspan(0, 100));
    index.set_progress(stop);
    expect_cancel([&] { index.merge(other); });
    index.set_progress(nullptr);
    index.merge(other, [](vlcc_phase, uint64_t, uint64_t) { return true; });
    cancelled = cancelled && index.size() == held + 100;
    // The memory estimate, and the context's cap checked against it before training: far
    // under it (even training that rebuilds its residuals to fit does not), refused.
    const auto need = comp.estimate_memory(n, d);
    cancelled = cancelled && need.first > n * d && need.second == 0;
    ctx.set_memory_cap(need.first / 50);
    try {
        comp.train(x, d);
        cancelled = false;
    } catch (const vlcc::Error& e) {
        cancelled = cancelled && e.status() == VLCC_STATUS_OUT_OF_MEMORY && comp.fingerprint() == codebook;
    }
    ctx.set_memory_cap(0);
    caught = caught && cancelled;
    std::printf("indexed %zu vectors at %zu bytes each; %d/10 queries found themselves; reload %s; errors %s\n",
                index.size(), comp.codec_size(), self, again.ids == r.ids ? "identical" : "DIFFERENT",
                caught ? "thrown" : "MISSING");
    return self == 10 && again.ids == r.ids && caught && lazy_ok ? 0 : 1;
}
