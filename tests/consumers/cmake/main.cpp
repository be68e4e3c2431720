// Trains, indexes and searches through the installed C++ wrapper: each vector finds itself.
#include <cstdio>
#include <vector>

#include "vlc_compress.hpp"

int main() {
    const size_t n = 4000, d = 16;
    std::vector<float> x(n * d);
    for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>((i * 7919 % 1009) % 97) / 10.0f + (i / d % 10);
    vlcc::Context ctx(VLCC_BACKEND_CPU, 0, 2);
    vlcc::Compressor c(ctx);
    c.set(VLCC_PARAM_ANCHORS, 32).set(VLCC_PARAM_BYTES_PER_VECTOR, 8);
    c.train(x, d);
    vlcc::Index index(c);
    std::vector<uint64_t> ids(n);
    for (size_t i = 0; i < n; i++) ids[i] = i;
    index.add(x, ids);
    const auto r = index.search(vlcc::span<const float>(x).subspan(0, 10 * d), vlcc::SearchParams(1, 32, 20), x);
    int found = 0;
    for (size_t q = 0; q < 10; q++) found += r.ids[q] == q;
    std::printf("vlc_compress %s: %d/10 queries found themselves\n", vlcc::version(), found);
    return found == 10 ? 0 : 1;
}
