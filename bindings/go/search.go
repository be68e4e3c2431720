// Searches of an index: parameters, filters, fetch callbacks, top-k, bounds and range.

package vlccompress

/*
#include <stdint.h>
#include <stdlib.h>
#include "vlc_compress.h"

// A device address travels as an integer: it is not Go memory, and no Go pointer holds it.
static vlcc_status index_search_device_raw(const vlcc_index* ix, const float* q, size_t nq,
                                           const vlcc_search_params* p, uintptr_t raw,
                                           size_t raw_n, uint64_t* ids, float* dist) {
	return vlcc_index_search_device_raw(ix, q, nq, p, (const float*)raw, raw_n, ids, dist);
}
// The Go filter trampoline (filter.go) and a setter taking its handle as an integer.
extern int vlccGoFilter(void *user, uint64_t id);
static vlcc_status set_go_filter(vlcc_search_params* p, uintptr_t handle) {
	return vlcc_search_params_set_filter_callback(p, vlccGoFilter, (void*)handle);
}
extern int vlccGoFetch(void *user, uint64_t *ids, size_t n, float *out);
static int go_fetch(void *user, const uint64_t *ids, size_t n, float *out) {
	return vlccGoFetch(user, (uint64_t*)ids, n, out);
}
static vlcc_status set_go_fetch(vlcc_search_params* p, uintptr_t handle) {
	return vlcc_search_params_set_fetch(p, handle ? go_fetch : NULL, (void*)handle);
}
// One call sets the three numbers a search takes, and stops at the first refusal.
static vlcc_status search_params(vlcc_search_params* p, size_t k, size_t nprobe, size_t rerank) {
	vlcc_status s = vlcc_search_params_set(p, VLCC_SEARCH_PARAM_K, (double)k);
	if (s == VLCC_STATUS_OK) s = vlcc_search_params_set(p, VLCC_SEARCH_PARAM_NPROBE, (double)nprobe);
	if (s == VLCC_STATUS_OK) s = vlcc_search_params_set(p, VLCC_SEARCH_PARAM_RERANK, (double)rerank);
	return s;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"time"
	"unsafe"
)

// BoundedResults are SearchBounds' answer: the results, a lower and an upper bound of each
// hit's true distance (NaN where missing), and per query the candidates re-scored exactly and
// whether its top-K is proven exact over its probed lists.
type BoundedResults struct {
	IDs          []uint64
	Distances    []float32
	Lower, Upper []float32
	Reranked     []int
	Certified    []bool
}

// SearchBounds is Search with each hit's distance bounds (the index must keep error bounds:
// NewIndexWithRefine, any kind but RefineNone) and, with p.RerankAuto, the certified re-rank's
// counts.
func (ix *Index) SearchBounds(queries []float32, p SearchParams) (BoundedResults, error) {
	var r BoundedResults
	if ix.dim == 0 || len(queries)%ix.dim != 0 || p.K <= 0 {
		return r, &Error{Status: StatusInvalidArgument, Message: "queries must be whole rows; K >= 1"}
	}
	nq := len(queries) / ix.dim
	r.Lower, r.Upper = make([]float32, nq*p.K), make([]float32, nq*p.K)
	rr, cf := make([]C.uint64_t, nq+1), make([]C.uint8_t, nq+1)
	rawRows := len(p.Raw) / ix.dim
	ids, dist, err := ix.search(queries, p, nil, nil, func(h *C.vlcc_index, nq int, sp *C.vlcc_search_params, ids *C.uint64_t, dist *C.float) C.vlcc_status {
		return C.vlcc_index_search_bounds(h, floatPtr(queries), C.size_t(nq), sp, floatPtr(p.Raw), C.size_t(rawRows), ids, dist, floatPtr(r.Lower), floatPtr(r.Upper), &rr[0], &cf[0])
	})
	runtime.KeepAlive(p.Raw)
	if err != nil {
		return BoundedResults{}, err
	}
	r.IDs, r.Distances = ids, dist
	r.Reranked, r.Certified = make([]int, nq), make([]bool, nq)
	for i := 0; i < nq; i++ {
		r.Reranked[i], r.Certified[i] = int(rr[i]), cf[i] != 0
	}
	return r, nil
}

// SearchParams are per-call search settings.
type SearchParams struct {
	K      int       // results per query
	NProbe int       // lists probed per query
	Rerank int       // 0, or >= K: re-score this many candidates exactly against Raw
	Raw    []float32 // raw vectors, row i = id i (needed when Rerank > 0, unless Fetch)
	Fetch  Fetch     // raw vectors by id for the re-rank, instead of Raw
	Filter *Filter   // ids the search may return (nil: any)
	// RerankAuto certifies the re-rank: Rerank (>= K) is then the most candidates kept,
	// re-scored in the order of their distance lower bounds until none left can beat the
	// K-th exact distance (an index with error bounds: NewIndexWithRefine, any kind but
	// RefineNone; and Raw or Fetch).
	RerankAuto bool
	// Progress hears the search (PhaseSearch: queries answered) and may cancel it
	// (ErrCancelled); nil: the index's ProgressFunc, else the context's.
	Progress ProgressFunc
	// Timeout stops the search with ErrTimedOut once it has run this long, rounded up to a
	// millisecond (0: the context's timeout, Context.SetTimeout).
	Timeout time.Duration
	// Report, when not nil, receives where the search ran and what of it fell back to the
	// host (after the call, success or not). Give each goroutine its own.
	Report *RunReport
}

// setCallbacks puts p's filter and fetch on the C parameters sp (of an index of dimension d);
// the returned func releases what they hold and must run after the search.
func setCallbacks(sp *C.vlcc_search_params, p SearchParams, d int) (C.vlcc_status, func()) {
	if p.RerankAuto {
		if s := C.vlcc_search_params_set(sp, C.VLCC_SEARCH_PARAM_RERANK_AUTO, 1); s != C.VLCC_STATUS_OK {
			return s, func() {}
		}
	}
	s, release := setFilter(sp, p.Filter)
	if s != C.VLCC_STATUS_OK {
		return s, release
	}
	s, released := setControl(sp, p)
	if s != C.VLCC_STATUS_OK || p.Fetch == nil {
		return s, func() { release(); released() }
	}
	h := cgo.NewHandle(fetchCall{p.Fetch, d})
	return C.set_go_fetch(sp, C.uintptr_t(h)), func() { release(); released(); h.Delete() }
}

// setFilter puts f on the C parameters sp; the returned func releases what it holds and must
// run after the search.
func setFilter(sp *C.vlcc_search_params, f *Filter) (C.vlcc_status, func()) {
	switch {
	case f == nil:
		return C.vlcc_search_params_clear_filter(sp), func() {}
	case f.fn != nil:
		h := cgo.NewHandle(f.fn)
		return C.set_go_filter(sp, C.uintptr_t(h)), h.Delete
	case f.ids != nil:
		var p *C.uint64_t
		if len(f.ids) > 0 {
			p = idsPtr(f.ids)
		}
		return C.vlcc_search_params_set_filter_ids(sp, p, C.size_t(len(f.ids))), func() {}
	default:
		// f.check has made sure that bits holds the bytes read here.
		var p *C.uint8_t
		if f.nBits > 0 {
			p = (*C.uint8_t)(unsafe.Pointer(&f.bits[0]))
		}
		return C.vlcc_search_params_set_filter_bitset(sp, p, C.uint64_t(f.nBits)), func() {}
	}
}

// DefaultSearchParams are the library's defaults for K, NProbe and Rerank (read from a new
// vlcc_search_params), with no Raw.
func DefaultSearchParams() (SearchParams, error) {
	var v [3]C.double
	err := call(func() C.vlcc_status {
		var sp *C.vlcc_search_params
		if s := C.vlcc_search_params_new(&sp); s != C.VLCC_STATUS_OK {
			return s
		}
		defer C.vlcc_search_params_free(sp)
		for i, id := range []C.uint32_t{C.VLCC_SEARCH_PARAM_K, C.VLCC_SEARCH_PARAM_NPROBE, C.VLCC_SEARCH_PARAM_RERANK} {
			if s := C.vlcc_search_params_get(sp, id, &v[i]); s != C.VLCC_STATUS_OK {
				return s
			}
		}
		return C.VLCC_STATUS_OK
	})
	return SearchParams{K: int(v[0]), NProbe: int(v[1]), Rerank: int(v[2])}, err
}

// Search returns K ids and distances per query, best first (NoID where fewer are found).
func (ix *Index) Search(queries []float32, p SearchParams) ([]uint64, []float32, error) {
	return ix.searchHost(queries, p, nil, nil)
}

// SearchInto is Search writing into ids and dist, which must hold K per query exactly
// (no allocation per call).
func (ix *Index) SearchInto(queries []float32, p SearchParams, ids []uint64, dist []float32) error {
	if ids == nil || dist == nil {
		return &Error{Status: StatusInvalidArgument, Message: "ids and dist must be given"}
	}
	_, _, err := ix.searchHost(queries, p, ids, dist)
	return err
}

func (ix *Index) searchHost(queries []float32, p SearchParams, ids []uint64, dist []float32) ([]uint64, []float32, error) {
	rawRows := 0
	if p.Raw != nil && ix.dim > 0 {
		if len(p.Raw)%ix.dim != 0 {
			return nil, nil, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("Raw: %d values are not whole rows of dimension %d (%d left over)", len(p.Raw), ix.dim, len(p.Raw)%ix.dim)}
		}
		rawRows = len(p.Raw) / ix.dim
	}
	ids, dist, err := ix.search(queries, p, ids, dist, func(h *C.vlcc_index, nq int, sp *C.vlcc_search_params, ids *C.uint64_t, dist *C.float) C.vlcc_status {
		return C.vlcc_index_search(h, floatPtr(queries), C.size_t(nq), sp, floatPtr(p.Raw), C.size_t(rawRows), ids, dist)
	})
	runtime.KeepAlive(p.Raw)
	return ids, dist, err
}

// SearchDeviceRaw is Search with the re-rank against rows raw vectors in CUDA device memory
// at address raw (row i = id i; p.Raw is ignored), read in place on the device: only the
// results come to the host. The context must run on CUDA.
func (ix *Index) SearchDeviceRaw(queries []float32, p SearchParams, raw uintptr, rows int) ([]uint64, []float32, error) {
	return ix.search(queries, p, nil, nil, func(h *C.vlcc_index, nq int, sp *C.vlcc_search_params, ids *C.uint64_t, dist *C.float) C.vlcc_status {
		return C.index_search_device_raw(h, floatPtr(queries), C.size_t(nq), sp, C.uintptr_t(raw), C.size_t(rows), ids, dist)
	})
}

// search checks the shapes, makes the result slices (or checks the caller's: both nil or
// both given) and the C parameters, and runs one search call into them.
func (ix *Index) search(queries []float32, p SearchParams, ids []uint64, dist []float32, run func(h *C.vlcc_index, nq int, sp *C.vlcc_search_params, ids *C.uint64_t, dist *C.float) C.vlcc_status) ([]uint64, []float32, error) {
	if ix.dim == 0 || len(queries)%ix.dim != 0 || p.K <= 0 || p.NProbe <= 0 || p.Rerank < 0 {
		return nil, nil, &Error{Status: StatusInvalidArgument, Message: "queries must be whole rows; K and NProbe >= 1"}
	}
	nq := len(queries) / ix.dim
	if ids == nil {
		ids, dist = make([]uint64, nq*p.K), make([]float32, nq*p.K)
	} else if len(ids) != nq*p.K || len(dist) != nq*p.K {
		return nil, nil, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("ids and dist hold %d and %d; %d queries x K %d need %d", len(ids), len(dist), nq, p.K, nq*p.K)}
	}
	if err := p.Filter.check(); err != nil {
		return nil, nil, err
	}
	if nq == 0 {
		return ids, dist, nil
	}
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
		var sp *C.vlcc_search_params
		if s := C.vlcc_search_params_new(&sp); s != C.VLCC_STATUS_OK {
			return s
		}
		defer C.vlcc_search_params_free(sp)
		if s := C.search_params(sp, C.size_t(p.K), C.size_t(p.NProbe), C.size_t(p.Rerank)); s != C.VLCC_STATUS_OK {
			return s
		}
		s, release := setCallbacks(sp, p, ix.dim)
		defer release()
		if s != C.VLCC_STATUS_OK {
			return s
		}
		s = run(h, nq, sp, idsPtr(ids), floatPtr(dist))
		p.Report.read()
		return s
	})
	runtime.KeepAlive(p.Filter)
	runtime.KeepAlive(queries)
	runtime.KeepAlive(ix)
	if err != nil {
		return nil, nil, err
	}
	return ids, dist, nil
}

// RangeResults are a range search's hits: query i's are IDs[Offsets[i]:Offsets[i+1]], with
// Distances at the same places, best first.
type RangeResults struct {
	Offsets   []int
	IDs       []uint64
	Distances []float32
}

// RangeSearch returns every vector of the probed lists (p.NProbe; p.K is not used) within
// radius of each query: squared L2 distance at most radius, or similarity at least radius
// for inner product and cosine; best first. p.Filter applies; with p.Rerank > 0 each hit is
// scored again exactly against p.Raw and kept only if still within the radius.
func (ix *Index) RangeSearch(queries []float32, radius float32, p SearchParams) (RangeResults, error) {
	if ix.dim == 0 || len(queries)%ix.dim != 0 || p.NProbe <= 0 || p.Rerank < 0 {
		return RangeResults{}, &Error{Status: StatusInvalidArgument, Message: "queries must be whole rows; NProbe >= 1"}
	}
	if err := p.Filter.check(); err != nil {
		return RangeResults{}, err
	}
	nq := len(queries) / ix.dim
	rawRows := len(p.Raw) / ix.dim
	var out RangeResults
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
		var sp *C.vlcc_search_params
		if s := C.vlcc_search_params_new(&sp); s != C.VLCC_STATUS_OK {
			return s
		}
		defer C.vlcc_search_params_free(sp)
		if s := C.search_params(sp, 1, C.size_t(p.NProbe), C.size_t(p.Rerank)); s != C.VLCC_STATUS_OK {
			return s
		}
		s, release := setCallbacks(sp, p, ix.dim)
		defer release()
		if s != C.VLCC_STATUS_OK {
			return s
		}
		var r *C.vlcc_range_results
		s = C.vlcc_index_range_search(h, floatPtr(queries), C.size_t(nq), sp, C.float(radius), floatPtr(p.Raw), C.size_t(rawRows), &r)
		p.Report.read()
		if s != C.VLCC_STATUS_OK {
			return s
		}
		defer C.vlcc_range_results_free(r)
		var n C.size_t
		var off *C.size_t
		var ids *C.uint64_t
		var dist *C.float
		if s := C.vlcc_range_results_view(r, &n, &off, &ids, &dist); s != C.VLCC_STATUS_OK {
			return s
		}
		offs := unsafe.Slice(off, int(n)+1)
		total := int(offs[n])
		out.Offsets = make([]int, int(n)+1)
		for i, o := range offs {
			out.Offsets[i] = int(o)
		}
		out.IDs = append([]uint64(nil), unsafe.Slice((*uint64)(unsafe.Pointer(ids)), total)...)
		out.Distances = append([]float32(nil), unsafe.Slice((*float32)(unsafe.Pointer(dist)), total)...)
		return C.VLCC_STATUS_OK
	})
	runtime.KeepAlive(queries)
	runtime.KeepAlive(p.Raw)
	runtime.KeepAlive(p.Filter)
	return out, err
}

// setSearchNumbers sets k, nprobe and rerank on sp in one call (the first refusal stops it).
func setSearchNumbers(sp *C.vlcc_search_params, k, nprobe, rerank int) C.vlcc_status {
	return C.search_params(sp, C.size_t(k), C.size_t(nprobe), C.size_t(rerank))
}
