// vlc_compress.hpp: header-only C++17/C++20 RAII wrapper over the vlc_compress C API.
//
// Handles are move-only and free themselves; a failed call throws vlcc::Error carrying the
// status and the library's message. Inputs and outputs are vlcc::span (std::span under C++20,
// a small equivalent under C++17), so vectors, arrays and memory-mapped buffers pass without
// copies. Thread rules are the C API's: Index::search may run
// from many threads at once; add/remove/train need exclusive access.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#if __cplusplus >= 202002L && __has_include(<span>)
#include <span>
#define VLCC_STD_SPAN 1
#endif

#include "vlc_compress.h"

namespace vlcc {

#ifdef VLCC_STD_SPAN
template <class T>
using span = std::span<T>;
#else
// What this wrapper uses of std::span, for C++17: a pointer and a length over contiguous
// elements (vectors, arrays, std::array, another span), unchecked like std::span.
template <class T>
class span {
public:
    constexpr span() noexcept = default;
    constexpr span(T* p, size_t n) noexcept : p_(p), n_(n) {}
    template <class C, class = std::enable_if_t<!std::is_same_v<std::decay_t<C>, span> &&
                                                std::is_convertible_v<decltype(std::data(std::declval<C&>())), T*>>>
    constexpr span(C&& c) noexcept : p_(std::data(c)), n_(std::size(c)) {}
    template <class U, class = std::enable_if_t<std::is_convertible_v<U*, T*>>>
    constexpr span(const span<U>& o) noexcept : p_(o.data()), n_(o.size()) {}
    constexpr T* data() const noexcept { return p_; }
    constexpr size_t size() const noexcept { return n_; }
    constexpr bool empty() const noexcept { return n_ == 0; }
    constexpr T* begin() const noexcept { return p_; }
    constexpr T* end() const noexcept { return p_ + n_; }
    constexpr T& operator[](size_t i) const noexcept { return p_[i]; }
    constexpr span subspan(size_t offset, size_t count) const noexcept { return span(p_ + offset, count); }

private:
    T* p_ = nullptr;
    size_t n_ = 0;
};
#endif

/// The loaded library's version, "MAJOR.MINOR.PATCH" (VLCC_VERSION_STRING of its header).
inline const char* version() noexcept { return vlcc_version(); }

/// The loaded library's version as MAJOR * 10000 + MINOR * 100 + PATCH (VLCC_VERSION_NUMBER).
inline uint32_t version_number() noexcept { return vlcc_version_number(); }

/// The ABI version of the loaded library (VLCC_ABI_VERSION of the header it was built with).
inline uint32_t abi_version() noexcept { return vlcc_abi_version(); }

/// A failed call: the vlcc_status and the message the library recorded for this thread.
class Error : public std::runtime_error {
public:
    Error(vlcc_status status, const std::string& message)
        : std::runtime_error(std::string(vlcc_status_str(static_cast<uint32_t>(status))) + ": " + message),
          status_(status) {}
    vlcc_status status() const noexcept { return status_; }

private:
    vlcc_status status_;
};

namespace detail {
inline void check(vlcc_status s) {
    if (s == VLCC_STATUS_OK) return;
    size_t n = 0;
    vlcc_last_error_message(nullptr, 0, &n);
    std::string msg(n, '\0');
    std::vector<char> buf(n + 1);
    vlcc_last_error_message(buf.data(), buf.size(), nullptr);
    msg.assign(buf.data(), n);
    throw Error(s, msg);
}
// Whole milliseconds, none below zero.
inline uint64_t millis(std::chrono::milliseconds t) { return static_cast<uint64_t>(t.count() < 0 ? 0 : t.count()); }
struct ContextFree { void operator()(vlcc_context* p) const noexcept { vlcc_context_free(p); } };
struct CompressorFree { void operator()(vlcc_compressor* p) const noexcept { vlcc_compressor_free(p); } };
struct IndexFree { void operator()(vlcc_index* p) const noexcept { vlcc_index_free(p); } };
// The bytes of a library-owned buffer that `fill` makes, copied out; the buffer is released.
template <class Fill>
std::vector<uint8_t> take_buffer(Fill fill) {
    vlcc_buffer b{nullptr, 0};
    check(fill(&b));
    std::vector<uint8_t> out(b.data, b.data + b.len);
    vlcc_buffer_free(&b);
    return out;
}
struct SearchParamsFree { void operator()(vlcc_search_params* p) const noexcept { vlcc_search_params_free(p); } };
struct RangeResultsFree { void operator()(vlcc_range_results* p) const noexcept { vlcc_range_results_free(p); } };
// The rows in `len` values of `width` each; a partial row throws (never silently dropped).
inline size_t rows(size_t len, size_t width, const char* what, const char* unit = "values") {
    if (width == 0 || len % width != 0)
        throw Error(VLCC_STATUS_INVALID_ARGUMENT,
                    std::string(what) + ": " + std::to_string(len) + " " + unit + " are not whole rows of " +
                        std::to_string(width) + " (" + std::to_string(width ? len % width : len) + " left over)");
    return len / width;
}
}  // namespace detail

/// Hears `done` of `total` in `phase` during train, encode, add and merge. Returning false
/// cancels the call, which throws Error with VLCC_STATUS_CANCELLED and leaves every object as
/// it was; an exception it throws cancels too. Called from the library's threads, one call at
/// a time per operation.
using ProgressFn = std::function<bool(vlcc_phase phase, uint64_t done, uint64_t total)>;

namespace detail {
// Sets an object's progress callback (the object bound in).
using ProgressSetter = std::function<vlcc_status(vlcc_progress_fn, void*)>;
inline int progress_trampoline(void* user, vlcc_phase phase, uint64_t done, uint64_t total) noexcept {
    try {
        return (*static_cast<const ProgressFn*>(user))(phase, done, total) ? 0 : 1;
    } catch (...) {
        return 1;
    }
}
// Installs `fn` (none when null) through `set(f, user)`.
template <class Set>
void install(Set set, const ProgressFn* fn) {
    check(fn ? set(&progress_trampoline, const_cast<ProgressFn*>(fn)) : set(nullptr, nullptr));
}
// Installs `fn` (none when empty) through `set` and keeps it in `slot`, in place of the old.
template <class Set>
void replace_progress(Set set, std::unique_ptr<ProgressFn>& slot, ProgressFn fn) {
    auto f = fn ? std::make_unique<ProgressFn>(std::move(fn)) : nullptr;
    install(set, f.get());
    slot = std::move(f);
}
// Runs `call` with `once` as the progress callback, then puts `own` back (none when null).
template <class Set, class Call>
auto with_progress(Set set, const ProgressFn& once, const ProgressFn* own, Call call) {
    install(set, &once);
    struct Restore {
        Set& set;
        const ProgressFn* own;
        ~Restore() { own ? set(&progress_trampoline, const_cast<ProgressFn*>(own)) : set(nullptr, nullptr); }
    } restore{set, own};
    return call();
}
}  // namespace detail

/// Where the calling thread's last call that ran work (train, encode, add, merge, a search,
/// load, verify) ran: its context's backend and, as vlcc_fallback bits, the parts a GPU
/// context answered on the host. Read it right after the call; throws INVALID_STATE where
/// that call was refused before its work.
inline vlcc_run_report last_run_report() {
    vlcc_run_report r{};
    detail::check(vlcc_last_run_report(&r));
    return r;
}

/// The names of the vlcc_fallback bits set in `fallbacks`, joined by '|' ("" for none).
inline std::string fallback_names(uint32_t fallbacks) {
    std::string out;
    for (uint32_t bit = 1; bit != 0 && bit <= fallbacks; bit <<= 1) {
        if (!(fallbacks & bit)) continue;
        if (!out.empty()) out += '|';
        out += vlcc_fallback_str(bit);
    }
    return out;
}

/// A backend, its device and a thread pool. Copies share it (reference-counted in C too).
// What a training parameter accepts (min and max included; whole numbers only where `whole`)
// and its default.
struct ParamBounds {
    double min = 0, max = 0, default_value = 0;
    bool whole = false;
};

inline ParamBounds param_bounds(vlcc_param param) {
    ParamBounds b;
    uint32_t whole = 0;
    detail::check(vlcc_param_bounds(static_cast<uint32_t>(param), &b.min, &b.max, &b.default_value, &whole));
    b.whole = whole != 0;
    return b;
}

class Context {
public:
    explicit Context(vlcc_backend backend = VLCC_BACKEND_AUTO, uint32_t device = 0, size_t threads = 0) {
        vlcc_context* p = nullptr;
        detail::check(vlcc_context_new(static_cast<uint32_t>(backend), device, threads, &p));
        p_.reset(p);
    }
    vlcc_backend backend() const {
        uint32_t b = 0;
        detail::check(vlcc_context_backend(p_.get(), &b));
        return static_cast<vlcc_backend>(b);
    }
    // Caps on the host memory and the device memory one call takes, in bytes (0 = none).
    void set_memory_cap(size_t bytes) const { detail::check(vlcc_context_set_memory_cap(p_.get(), bytes)); }
    void set_device_memory_cap(size_t bytes) const {
        detail::check(vlcc_context_set_device_memory_cap(p_.get(), bytes));
    }
    // Host searches rotate every query in f32 (the same results on every CPU), or by default
    // in 8-bit integers where the CPU and the codes make that pay (vlcc_context_set_exact_rotation).
    void set_exact_rotation(bool exact) const {
        detail::check(vlcc_context_set_exact_rotation(p_.get(), exact ? 1 : 0));
    }
    size_t threads() const {
        size_t n = 0;
        detail::check(vlcc_context_threads(p_.get(), &n));
        return n;
    }
    // Searches, range searches, loads and verifies on this context without a timeout of
    // their own stop past `t` with VLCC_STATUS_TIMED_OUT (zero: none); whole milliseconds.
    void set_timeout(std::chrono::milliseconds t) const {
        detail::check(vlcc_context_set_timeout(p_.get(), detail::millis(t)));
    }
    std::chrono::milliseconds timeout() const {
        uint64_t ms = 0;
        detail::check(vlcc_context_timeout(p_.get(), &ms));
        return std::chrono::milliseconds(ms);
    }
    // Long calls on objects made from this context that have no callback of their own report
    // to `fn`; an empty function removes it. The context must outlive the calls that use it.
    void set_progress(ProgressFn fn) {
        detail::replace_progress(setter(), progress_, std::move(fn));
    }
    const vlcc_context* get() const noexcept { return p_.get(); }

    Context(Context&&) noexcept = default;
    Context& operator=(Context&& o) noexcept {
        if (this != &o) {
            clear_progress();
            progress_ = std::move(o.progress_);
            p_ = std::move(o.p_);
        }
        return *this;
    }
    // Objects made from the context keep it alive in C: they stop reporting to its callback.
    ~Context() { clear_progress(); }

private:
    detail::ProgressSetter setter() const {
        return [p = p_.get()](vlcc_progress_fn f, void* u) { return vlcc_context_set_progress(p, f, u); };
    }
    void clear_progress() noexcept {
        if (p_ && progress_) vlcc_context_set_progress(p_.get(), nullptr, nullptr);
    }
    // Declared first, destroyed last: the callback outlives the handle's reference.
    std::unique_ptr<ProgressFn> progress_;
    std::unique_ptr<vlcc_context, detail::ContextFree> p_;
};

/// Training parameters and, once trained, a codebook.
class Compressor {
public:
    explicit Compressor(const Context& ctx) {
        vlcc_compressor* p = nullptr;
        detail::check(vlcc_compressor_new(ctx.get(), &p));
        p_.reset(p);
    }
    static Compressor load_codebook(const Context& ctx, const std::string& path) {
        vlcc_compressor* p = nullptr;
        detail::check(vlcc_compressor_load_codebook(ctx.get(), path.c_str(), &p));
        return Compressor(p);
    }
    // A trained compressor from serialize_codebook's bytes (or an index's).
    static Compressor deserialize_codebook(const Context& ctx, span<const uint8_t> bytes) {
        vlcc_compressor* p = nullptr;
        detail::check(vlcc_compressor_deserialize_codebook(ctx.get(), bytes.data(), bytes.size(), &p));
        return Compressor(p);
    }
    // The codebook's bytes (those of its file).
    std::vector<uint8_t> serialize_codebook() const {
        return detail::take_buffer([&](vlcc_buffer* b) { return vlcc_compressor_serialize_codebook(p_.get(), b); });
    }
    // A hash of the codebook's contents: indexes on equal fingerprints merge.
    uint64_t fingerprint() const {
        uint64_t f = 0;
        detail::check(vlcc_compressor_fingerprint(p_.get(), &f));
        return f;
    }
    // What the last training measured.
    vlcc_train_report train_report() const {
        vlcc_train_report r{};
        detail::check(vlcc_compressor_train_report(p_.get(), &r));
        return r;
    }
    // The trained anchors (the lists' centroids), anchors x dim() floats, row-major.
    std::vector<float> anchors() const {
        size_t m = 0;
        detail::check(vlcc_compressor_anchors(p_.get(), nullptr, 0, &m));
        std::vector<float> out(m * dim());
        detail::check(vlcc_compressor_anchors(p_.get(), out.data(), out.size(), &m));
        return out;
    }
    Compressor& set(vlcc_param param, double value) {
        detail::check(vlcc_compressor_set_param(p_.get(), static_cast<uint32_t>(param), value));
        return *this;
    }
    double get(vlcc_param param) const {
        double v = 0;
        detail::check(vlcc_compressor_get_param(p_.get(), static_cast<uint32_t>(param), &v));
        return v;
    }
    void train(span<const float> x, size_t d) {
        detail::check(vlcc_compressor_train(p_.get(), x.data(), detail::rows(x.size(), d, "train: x"), d));
    }
    // The working memory {host, device} in bytes that training n x d vectors with these
    // parameters on this context takes at its peak (the input excluded): what the context's
    // memory cap is checked against. Device is 0 on the CPU.
    std::pair<uint64_t, uint64_t> estimate_memory(size_t n, size_t d) const {
        uint64_t host = 0, device = 0;
        detail::check(vlcc_compressor_estimate_memory(p_.get(), n, d, &host, &device));
        return {host, device};
    }
    // The memory {host, device} in bytes that `work` takes at its peak with these parameters
    // on this context, for n vectors of d dimensions (vlcc_estimate_memory): TRAIN, training;
    // BUILD, adding n vectors to an empty index in one call; SEARCH, the first search of an
    // index of n vectors.
    std::pair<uint64_t, uint64_t> estimate_memory(vlcc_work work, size_t n, size_t d) const {
        uint64_t host = 0, device = 0;
        detail::check(vlcc_estimate_memory(p_.get(), static_cast<uint32_t>(work), n, d, &host, &device));
        return {host, device};
    }
    // train, reporting to `progress` for this call only (it may cancel: see ProgressFn).
    void train(span<const float> x, size_t d, const ProgressFn& progress) {
        detail::with_progress(setter(), progress, progress_.get(), [&] { train(x, d); });
    }
    // Train and encode calls report to `fn` (instead of the context's callback); an empty
    // function removes it. Exclusive access.
    void set_progress(ProgressFn fn) {
        detail::replace_progress(setter(), progress_, std::move(fn));
    }
    // encode, reporting to `progress` for this call only. Exclusive access (it swaps the
    // compressor's callback for the call).
    std::vector<uint8_t> encode(span<const float> x, const ProgressFn& progress) {
        return detail::with_progress(setter(), progress, progress_.get(), [&] { return encode(x); });
    }
    size_t dim() const {
        size_t d = 0;
        detail::check(vlcc_compressor_dim(p_.get(), &d));
        return d;
    }
    size_t codec_size() const {
        size_t s = 0;
        detail::check(vlcc_compressor_codec_size(p_.get(), &s));
        return s;
    }
    std::vector<uint8_t> encode(span<const float> x) const {
        std::vector<uint8_t> out(detail::rows(x.size(), dim(), "encode: x") * codec_size());
        encode_into(x, out);
        return out;
    }
    // x as IEEE half-precision bit patterns.
    std::vector<uint8_t> encode_f16(span<const uint16_t> x) const {
        const size_t n = detail::rows(x.size(), dim(), "encode_f16: x");
        std::vector<uint8_t> out(n * codec_size());
        detail::check(vlcc_compressor_encode_f16(p_.get(), x.data(), n, out.data(), out.size()));
        return out;
    }
    void encode_into(span<const float> x, span<uint8_t> out) const {
        const size_t n = detail::rows(x.size(), dim(), "encode_into: x");
        detail::check(vlcc_compressor_encode(p_.get(), x.data(), n, out.data(), out.size()));
    }
    // n vectors already in CUDA device memory (the context's device), read in place; only the
    // codes come back. Throws with BACKEND_UNAVAILABLE on contexts that do not run on CUDA.
    std::vector<uint8_t> encode_device(const float* x_device, size_t n) const {
        std::vector<uint8_t> out(n * codec_size());
        detail::check(vlcc_compressor_encode_device(p_.get(), x_device, n, out.data(), out.size()));
        return out;
    }
    std::vector<float> decode(span<const uint8_t> codes) const {
        const size_t n = detail::rows(codes.size(), codec_size(), "decode: codes", "bytes");
        std::vector<float> out(n * dim());
        detail::check(vlcc_compressor_decode(p_.get(), codes.data(), n, out.data(), out.size()));
        return out;
    }
    void save_codebook(const std::string& path) const {
        detail::check(vlcc_compressor_save_codebook(p_.get(), path.c_str()));
    }
    // The C handle, for calls this wrapper does not cover; it stays owned here.
    const vlcc_compressor* get() const noexcept { return p_.get(); }
    vlcc_compressor* get() noexcept { return p_.get(); }

private:
    explicit Compressor(vlcc_compressor* p) : p_(p) {}
    detail::ProgressSetter setter() {
        return [p = p_.get()](vlcc_progress_fn f, void* u) { return vlcc_compressor_set_progress(p, f, u); };
    }
    // Declared first, destroyed last: the handle goes before the callback it may call.
    std::unique_ptr<ProgressFn> progress_;
    std::unique_ptr<vlcc_compressor, detail::CompressorFree> p_;
};

/// What a search asks for (vlcc_search_params): k results per query over nprobe lists, the best
/// rerank candidates re-scored exactly (0: none).
class SearchParams {
public:
    SearchParams() {
        vlcc_search_params* p = nullptr;
        detail::check(vlcc_search_params_new(&p));
        p_.reset(p);
    }
    SearchParams(size_t k, size_t nprobe, size_t rerank = 0) : SearchParams() {
        set(VLCC_SEARCH_PARAM_K, static_cast<double>(k))
            .set(VLCC_SEARCH_PARAM_NPROBE, static_cast<double>(nprobe))
            .set(VLCC_SEARCH_PARAM_RERANK, static_cast<double>(rerank));
    }
    SearchParams& set(vlcc_search_param param, double value) {
        detail::check(vlcc_search_params_set(p_.get(), static_cast<uint32_t>(param), value));
        return *this;
    }
    double get(vlcc_search_param param) const {
        double v = 0;
        detail::check(vlcc_search_params_get(p_.get(), static_cast<uint32_t>(param), &v));
        return v;
    }
    size_t k() const { return static_cast<size_t>(get(VLCC_SEARCH_PARAM_K)); }
    // A certified re-rank (VLCC_SEARCH_PARAM_RERANK_AUTO): rerank is then its cap.
    SearchParams& rerank_auto(bool on) { return set(VLCC_SEARCH_PARAM_RERANK_AUTO, on ? 1 : 0); }
    const vlcc_search_params* get() const noexcept { return p_.get(); }

    // Searches with these parameters report to `fn` (phase VLCC_PHASE_SEARCH: queries
    // answered) instead of the index's or the context's callback; returning false (or
    // throwing) stops the search with VLCC_STATUS_CANCELLED, outputs untouched. Called from
    // the library's threads one call at a time; an empty function removes it.
    SearchParams& progress(ProgressFn fn) {
        auto f = fn ? std::make_unique<ProgressFn>(std::move(fn)) : nullptr;
        detail::check(f ? vlcc_search_params_set_progress(p_.get(), &detail::progress_trampoline, f.get())
                        : vlcc_search_params_set_progress(p_.get(), nullptr, nullptr));
        progress_ = std::move(f);
        return *this;
    }
    // Searches with these parameters stop past `t` with VLCC_STATUS_TIMED_OUT (zero: the
    // context's timeout); whole milliseconds.
    SearchParams& timeout(std::chrono::milliseconds t) {
        return set(VLCC_SEARCH_PARAM_TIMEOUT_MS, static_cast<double>(detail::millis(t)));
    }

    // Searches return only ids in [0, n_bits) whose bit is set (bit i%8 of byte i/8); copied.
    SearchParams& filter_bitset(span<const uint8_t> bits, uint64_t n_bits) {
        detail::check(vlcc_search_params_set_filter_bitset(p_.get(), bits.data(), n_bits));
        fn_.reset();
        return *this;
    }
    // Searches return only these ids (sorted ascending); copied.
    SearchParams& filter_ids(span<const uint64_t> ids) {
        detail::check(vlcc_search_params_set_filter_ids(p_.get(), ids.data(), ids.size()));
        fn_.reset();
        return *this;
    }
    // Searches return only ids for which allow(id) is true. It is called from several threads
    // at once; an exception it throws fails the search with VLCC_STATUS_CALLBACK_FAILED.
    SearchParams& filter(std::function<bool(uint64_t)> allow) {
        auto fn = std::make_unique<std::function<bool(uint64_t)>>(std::move(allow));
        detail::check(vlcc_search_params_set_filter_callback(p_.get(), &SearchParams::trampoline, fn.get()));
        fn_ = std::move(fn);
        return *this;
    }
    SearchParams& clear_filter() {
        detail::check(vlcc_search_params_clear_filter(p_.get()));
        fn_.reset();
        return *this;
    }
    // The re-rank gets its candidates' raw vectors from fetch(ids, out) (ids.size() x d floats
    // to write), instead of a dense array: called once per query, from several threads at
    // once; an exception fails the search with VLCC_STATUS_CALLBACK_FAILED. An empty function
    // removes it.
    using FetchFn = std::function<void(span<const uint64_t> ids, span<float> out)>;
    SearchParams& fetch(FetchFn f, size_t dim) {
        if (!f) {
            detail::check(vlcc_search_params_set_fetch(p_.get(), nullptr, nullptr));
            fetch_.reset();
            return *this;
        }
        auto st = std::make_unique<FetchState>(FetchState{std::move(f), dim});
        detail::check(vlcc_search_params_set_fetch(p_.get(), &SearchParams::fetch_trampoline, st.get()));
        fetch_ = std::move(st);
        return *this;
    }

private:
    static int trampoline(void* user, uint64_t id) noexcept {
        try {
            return (*static_cast<std::function<bool(uint64_t)>*>(user))(id) ? 1 : 0;
        } catch (...) {
            return -1;
        }
    }
    struct FetchState {
        FetchFn f;
        size_t dim;
    };
    static int fetch_trampoline(void* user, const uint64_t* ids, size_t n, float* out) noexcept {
        try {
            auto* st = static_cast<FetchState*>(user);
            st->f(span<const uint64_t>(ids, n), span<float>(out, n * st->dim));
            return VLCC_STATUS_OK;
        } catch (...) {
            return -1;
        }
    }
    std::unique_ptr<vlcc_search_params, detail::SearchParamsFree> p_;
    // The callbacks' state, alive as long as the parameters that point at it.
    std::unique_ptr<std::function<bool(uint64_t)>> fn_;
    std::unique_ptr<FetchState> fetch_;
    std::unique_ptr<ProgressFn> progress_;
};

/// Search results, best first: k per query.
struct Results {
    size_t k = 0;
    std::vector<uint64_t> ids;      // VLCC_NO_ID where fewer than k are found
    std::vector<float> distances;  // squared L2, or similarity for IP/cosine; NaN where missing
    // Hits found for query q: its slots before the first VLCC_NO_ID.
    size_t found(size_t q) const {
        size_t n = 0;
        while (n < k && ids[q * k + n] != VLCC_NO_ID) n++;
        return n;
    }
};

/// Range-search results: query i's hits are ids[offsets[i] .. offsets[i + 1]], best first.
struct RangeResults {
    std::vector<size_t> offsets;  // nq + 1
    std::vector<uint64_t> ids;
    std::vector<float> distances;
};

/// Results with each hit's distance bounds (search_bounds).
struct BoundedResults {
    Results results;
    std::vector<float> lower, upper;  // per slot; NaN where missing
    std::vector<uint64_t> reranked;   // per query: candidates re-scored exactly
    std::vector<uint8_t> certified;   // per query: 1 where the top-k is proven exact
};

/// A searchable compressed index.
class Index {
public:
    explicit Index(const Compressor& c) {
        vlcc_index* p = nullptr;
        detail::check(vlcc_index_new(c.get(), &p));
        p_.reset(p);
    }
    // An index keeping refinement vectors of kind `refine`: a search with rerank > 0 and no
    // raw vectors or fetch re-ranks against them.
    Index(const Compressor& c, vlcc_refine refine) {
        vlcc_index* p = nullptr;
        detail::check(vlcc_index_new_with_refine(c.get(), static_cast<uint32_t>(refine), &p));
        p_.reset(p);
    }
    vlcc_refine refine() const {
        uint32_t r = 0;
        detail::check(vlcc_index_refine(p_.get(), &r));
        return static_cast<vlcc_refine>(r);
    }
    static Index load(const Context& ctx, const std::string& path, bool mmap = true) {
        vlcc_index* p = nullptr;
        detail::check(vlcc_index_load(ctx.get(), path.c_str(), mmap ? 1 : 0, &p));
        return Index(p);
    }
    // Maps an index file checking its structure, codebook and ids but not its codes'
    // checksums (a large file opens without reading the codes' pages); verify() checks them.
    static Index load_deferred(const Context& ctx, const std::string& path) {
        vlcc_index* p = nullptr;
        detail::check(vlcc_index_load(ctx.get(), path.c_str(), VLCC_LOAD_FLAG_MMAP | VLCC_LOAD_FLAG_DEFER_CHECKSUMS, &p));
        return Index(p);
    }
    // Checks every checksum of a memory-mapped index's file; throws CORRUPT naming the first
    // damaged section. An index held in memory has nothing to check.
    void verify() const { detail::check(vlcc_index_verify(p_.get())); }
    // load (VLCC_LOAD_FLAG_* in `flags`), its checksums reporting to `progress` (phase
    // VLCC_PHASE_VERIFY: bytes checked; empty: the context's callback), which may cancel;
    // past `timeout` (zero: the context's) it throws with VLCC_STATUS_TIMED_OUT.
    static Index load(const Context& ctx, const std::string& path, int32_t flags, const ProgressFn& progress,
                      std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
        vlcc_index* p = nullptr;
        detail::check(vlcc_index_load_watched(ctx.get(), path.c_str(), flags,
                                              progress ? &detail::progress_trampoline : nullptr,
                                              const_cast<ProgressFn*>(&progress), detail::millis(timeout), &p));
        return Index(p);
    }
    // verify, watched as that load (empty `progress`: the index's callback, else the context's).
    void verify(const ProgressFn& progress, std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) const {
        detail::check(vlcc_index_verify_watched(p_.get(), progress ? &detail::progress_trampoline : nullptr,
                                                const_cast<ProgressFn*>(&progress), detail::millis(timeout)));
    }
    // The memory {host, device} in bytes that `work` on this index takes at its peak
    // (vlcc_index_estimate_memory): BUILD, adding n vectors in one call; SEARCH, searching n
    // queries with `params` (null: the defaults). What the context's memory cap is checked
    // against.
    std::pair<uint64_t, uint64_t> estimate_memory(vlcc_work work, size_t n,
                                                  const SearchParams* params = nullptr) const {
        uint64_t host = 0, device = 0;
        detail::check(vlcc_index_estimate_memory(p_.get(), static_cast<uint32_t>(work), n,
                                                 params ? params->get() : nullptr, &host, &device));
        return {host, device};
    }
    // Memory by part, in bytes (parts built on demand read 0 until built).
    vlcc_index_memory memory_usage() const {
        vlcc_index_memory m{};
        detail::check(vlcc_index_memory_usage(p_.get(), &m));
        return m;
    }
    // An index on ctx from serialize()'s bytes (copied).
    static Index deserialize(const Context& ctx, span<const uint8_t> bytes) {
        vlcc_index* p = nullptr;
        detail::check(vlcc_index_deserialize(ctx.get(), bytes.data(), bytes.size(), &p));
        return Index(p);
    }
    // The index's bytes (those of its file).
    std::vector<uint8_t> serialize() const {
        return detail::take_buffer([&](vlcc_buffer* b) { return vlcc_index_serialize(p_.get(), b); });
    }
    vlcc_index_info stats() const {
        vlcc_index_info s{};
        detail::check(vlcc_index_stats(p_.get(), &s));
        return s;
    }
    // Appends every vector of other (built on the same codebook).
    void merge(const Index& other) { detail::check(vlcc_index_merge(p_.get(), other.p_.get())); }
    // merge, reporting to `progress` for this call only (it may cancel: see ProgressFn).
    void merge(const Index& other, const ProgressFn& progress) {
        detail::with_progress(setter(), progress, progress_.get(), [&] { merge(other); });
    }
    // Add and merge calls report to `fn` (instead of the context's callback); an empty
    // function removes it. Exclusive access.
    void set_progress(ProgressFn fn) {
        detail::replace_progress(setter(), progress_, std::move(fn));
    }
    // Every stored vector's id and its approximate vector (size() x dim() floats), list by list.
    std::pair<std::vector<uint64_t>, std::vector<float>> reconstruct() const {
        size_t n = 0;
        detail::check(vlcc_index_reconstruct(p_.get(), nullptr, nullptr, 0, &n));
        std::pair<std::vector<uint64_t>, std::vector<float>> out{std::vector<uint64_t>(n),
                                                                 std::vector<float>(n * dim())};
        detail::check(vlcc_index_reconstruct(p_.get(), out.first.data(), out.second.data(), n, &n));
        return out;
    }
    size_t dim() const {
        size_t d = 0;
        detail::check(vlcc_index_dim(p_.get(), &d));
        return d;
    }
    size_t size() const {
        size_t n = 0;
        detail::check(vlcc_index_size(p_.get(), &n));
        return n;
    }
    void add(span<const float> x, span<const uint64_t> ids) {
        if (x.size() != ids.size() * dim()) throw Error(VLCC_STATUS_INVALID_ARGUMENT, "x must hold one row per id");
        detail::check(vlcc_index_add(p_.get(), x.data(), ids.size(), ids.data()));
    }
    // add, reporting to `progress` for this call only (it may cancel: see ProgressFn).
    void add(span<const float> x, span<const uint64_t> ids, const ProgressFn& progress) {
        detail::with_progress(setter(), progress, progress_.get(), [&] { add(x, ids); });
    }
    // IEEE half-precision input (binary16 bit patterns, one row per id).
    void add_f16(span<const uint16_t> x, span<const uint64_t> ids) {
        if (x.size() != ids.size() * dim()) throw Error(VLCC_STATUS_INVALID_ARGUMENT, "x must hold one row per id");
        detail::check(vlcc_index_add_f16(p_.get(), x.data(), ids.size(), ids.data()));
    }
    // Vectors already in CUDA device memory (one row per id), read in place.
    void add_device(const float* x_device, span<const uint64_t> ids) {
        detail::check(vlcc_index_add_device(p_.get(), x_device, ids.size(), ids.data()));
    }
    Results search(span<const float> queries, const SearchParams& p, span<const float> raw = {}) const {
        const size_t d = dim(), nq = detail::rows(queries.size(), d, "search: queries"), k = p.k();
        const size_t raw_n = raw.empty() ? 0 : detail::rows(raw.size(), d, "search: raw");
        Results r{k, std::vector<uint64_t>(nq * k), std::vector<float>(nq * k)};
        detail::check(vlcc_index_search(p_.get(), queries.data(), nq, p.get(), raw.data(), raw_n,
                                        r.ids.data(), r.distances.data()));
        return r;
    }
    Results search(span<const float> queries, size_t k, size_t nprobe, size_t rerank = 0,
                   span<const float> raw = {}) const {
        return search(queries, SearchParams(k, nprobe, rerank), raw);
    }
    // search, with the re-rank against raw_n rows in CUDA device memory (row i = id i), read
    // in place: only the results come to the host.
    Results search_device_raw(span<const float> queries, size_t k, size_t nprobe, size_t rerank,
                              const float* raw_device, size_t raw_n) const {
        const size_t nq = detail::rows(queries.size(), dim(), "search_device_raw: queries");
        Results r{k, std::vector<uint64_t>(nq * k), std::vector<float>(nq * k)};
        const SearchParams p(k, nprobe, rerank);
        detail::check(vlcc_index_search_device_raw(p_.get(), queries.data(), nq, p.get(), raw_device, raw_n,
                                                   r.ids.data(), r.distances.data()));
        return r;
    }
    size_t remove(span<const uint64_t> ids) {
        size_t n = 0;
        detail::check(vlcc_index_remove(p_.get(), ids.data(), ids.size(), &n));
        return n;
    }
    void save(const std::string& path) const { detail::check(vlcc_index_save(p_.get(), path.c_str())); }
    // Every vector within radius (squared L2; a similarity floor for IP/cosine) of each query
    // over the probed lists, best first (p's k is not used, its filter is).
    RangeResults range_search(span<const float> queries, float radius, const SearchParams& p,
                              span<const float> raw = {}) const {
        const size_t d = dim(), nq = detail::rows(queries.size(), d, "range_search: queries");
        const size_t raw_n = raw.empty() ? 0 : detail::rows(raw.size(), d, "range_search: raw");
        vlcc_range_results* r = nullptr;
        detail::check(vlcc_index_range_search(p_.get(), queries.data(), nq, p.get(), radius, raw.data(), raw_n, &r));
        std::unique_ptr<vlcc_range_results, detail::RangeResultsFree> owned(r);
        size_t n = 0;
        const size_t* off = nullptr;
        const uint64_t* ids = nullptr;
        const float* dist = nullptr;
        detail::check(vlcc_range_results_view(r, &n, &off, &ids, &dist));
        return RangeResults{std::vector<size_t>(off, off + n + 1), std::vector<uint64_t>(ids, ids + off[n]),
                            std::vector<float>(dist, dist + off[n])};
    }
    // search with each hit's distance bounds (an index with error bounds: Index(c, refine)
    // with any kind but NONE); with p.rerank_auto(true), the certified re-rank's counts.
    BoundedResults search_bounds(span<const float> queries, const SearchParams& p, span<const float> raw = {}) const {
        const size_t d = dim(), nq = detail::rows(queries.size(), d, "search_bounds: queries"), k = p.k();
        const size_t raw_n = raw.empty() ? 0 : detail::rows(raw.size(), d, "search_bounds: raw");
        BoundedResults b{Results{k, std::vector<uint64_t>(nq * k), std::vector<float>(nq * k)},
                         std::vector<float>(nq * k), std::vector<float>(nq * k), std::vector<uint64_t>(nq),
                         std::vector<uint8_t>(nq)};
        detail::check(vlcc_index_search_bounds(p_.get(), queries.data(), nq, p.get(), raw.data(), raw_n,
                                               b.results.ids.data(), b.results.distances.data(), b.lower.data(),
                                               b.upper.data(), b.reranked.data(), b.certified.data()));
        return b;
    }
    // For each id, whether a vector with it is held (the first call by id builds the id map).
    std::vector<bool> contains(span<const uint64_t> ids) const {
        std::vector<uint8_t> flags(ids.size());
        detail::check(vlcc_index_contains(p_.get(), ids.data(), ids.size(), flags.data()));
        return std::vector<bool>(flags.begin(), flags.end());
    }
    // The approximate vectors of ids (ids.size() x dim() floats, in order); where several
    // vectors share an id, the first added. An id not held throws INVALID_ARGUMENT.
    std::vector<float> reconstruct(span<const uint64_t> ids) const {
        std::vector<float> out(ids.size() * dim());
        detail::check(vlcc_index_reconstruct_ids(p_.get(), ids.data(), ids.size(), out.data()));
        return out;
    }
    // Bytes of one code as codes() gives it (anchor id, then residual code).
    size_t codec_size() const {
        size_t n = 0;
        detail::check(vlcc_index_codec_size(p_.get(), &n));
        return n;
    }
    // The codes of ids (ids.size() x codec_size() bytes), as Compressor::encode gives them.
    std::vector<uint8_t> codes(span<const uint64_t> ids) const {
        std::vector<uint8_t> out(ids.size() * codec_size());
        detail::check(vlcc_index_get_codes(p_.get(), ids.data(), ids.size(), out.data()));
        return out;
    }

    // The C handle, for calls this wrapper does not cover; it stays owned here.
    const vlcc_index* get() const noexcept { return p_.get(); }
    vlcc_index* get() noexcept { return p_.get(); }

private:
    explicit Index(vlcc_index* p) : p_(p) {}
    detail::ProgressSetter setter() {
        return [p = p_.get()](vlcc_progress_fn f, void* u) { return vlcc_index_set_progress(p, f, u); };
    }
    // Declared first, destroyed last: the handle goes before the callback it may call.
    std::unique_ptr<ProgressFn> progress_;
    std::unique_ptr<vlcc_index, detail::IndexFree> p_;
};

}  // namespace vlcc
