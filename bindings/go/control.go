package vlccompress

/*
#include <stdint.h>
#include <stdlib.h>
#include "vlc_compress.h"

extern int vlccGoProgress(void *user, vlcc_phase phase, uint64_t done, uint64_t total);
static vlcc_status set_search_progress(vlcc_search_params* p, uintptr_t h) {
	return vlcc_search_params_set_progress(p, h ? vlccGoProgress : NULL, (void*)h);
}
static vlcc_status load_watched(const vlcc_context* c, const char* path, int32_t flags,
                                uintptr_t h, vlcc_index** out) {
	return vlcc_index_load_watched(c, path, flags, h ? vlccGoProgress : NULL, (void*)h, 0, out);
}
static vlcc_status verify_watched(const vlcc_index* ix, uintptr_t h) {
	return vlcc_index_verify_watched(ix, h ? vlccGoProgress : NULL, (void*)h, 0);
}
*/
import "C"

import (
	"context"
	"runtime"
	"runtime/cgo"
	"time"
	"unsafe"
)

// SetTimeout makes every long call on objects made from this context (Train, Encode, Add,
// Merge, Search, RangeSearch, SearchBounds, Load onto it, Verify) stop with ErrTimedOut once
// it has run for d (rounded up to a millisecond), changing nothing; 0 removes the limit. A
// search's own SearchParams.Timeout takes precedence.
func (c *Context) SetTimeout(d time.Duration) error {
	if c == nil || c.p == nil {
		return &Error{Status: StatusInvalidState, Message: "the context is closed"}
	}
	ms := C.uint64_t(millis(d))
	return call(func() C.vlcc_status { return C.vlcc_context_set_timeout(c.p, ms) })
}

// Timeout is the context's timeout (0: none).
func (c *Context) Timeout() (time.Duration, error) {
	if c == nil || c.p == nil {
		return 0, &Error{Status: StatusInvalidState, Message: "the context is closed"}
	}
	var ms C.uint64_t
	err := call(func() C.vlcc_status { return C.vlcc_context_timeout(c.p, &ms) })
	return time.Duration(ms) * time.Millisecond, err
}

// millis is d in whole milliseconds, rounded up (0 stays 0).
func millis(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	return uint64((d + time.Millisecond - 1) / time.Millisecond)
}

// setControl puts p's Progress and Timeout on the C parameters sp; the returned func
// releases what they hold and must run after the search.
func setControl(sp *C.vlcc_search_params, p SearchParams) (C.vlcc_status, func()) {
	if p.Timeout > 0 {
		ms := C.double(millis(p.Timeout))
		if s := C.vlcc_search_params_set(sp, C.VLCC_SEARCH_PARAM_TIMEOUT_MS, ms); s != C.VLCC_STATUS_OK {
			return s, func() {}
		}
	}
	if p.Progress == nil {
		return C.VLCC_STATUS_OK, func() {}
	}
	h := cgo.NewHandle(p.Progress)
	return C.set_search_progress(sp, C.uintptr_t(h)), h.Delete
}

// searchFunc is the ProgressFunc a search with p hears: its own, else the index's, else
// the context's (nil where none is set).
func (ix *Index) searchFunc(p SearchParams) ProgressFunc {
	if p.Progress != nil {
		return p.Progress
	}
	if f, _ := ix.progress.get(); f != nil {
		return f
	}
	return ix.ctx.progressFunc()
}

// SearchContext is Search, stopped when ctx is done (within about 10 ms and one query on the
// host, one batch on a GPU): the error then matches both ErrCancelled and ctx.Err(), and
// nothing is returned. p.Progress, else the index's or the context's ProgressFunc, still
// hears the search.
func (ix *Index) SearchContext(ctx context.Context, queries []float32, p SearchParams) ([]uint64, []float32, error) {
	if err := doneBefore(ctx); err != nil {
		return nil, nil, err
	}
	p.Progress = watching(ctx, ix.searchFunc(p))
	ids, dist, err := ix.Search(queries, p)
	return ids, dist, withCause(ctx, err)
}

// RangeSearchContext is RangeSearch, stopped when ctx is done (as SearchContext).
func (ix *Index) RangeSearchContext(ctx context.Context, queries []float32, radius float32, p SearchParams) (RangeResults, error) {
	if err := doneBefore(ctx); err != nil {
		return RangeResults{}, err
	}
	p.Progress = watching(ctx, ix.searchFunc(p))
	r, err := ix.RangeSearch(queries, radius, p)
	return r, withCause(ctx, err)
}

// SearchBoundsContext is SearchBounds, stopped when ctx is done (as SearchContext).
func (ix *Index) SearchBoundsContext(ctx context.Context, queries []float32, p SearchParams) (BoundedResults, error) {
	if err := doneBefore(ctx); err != nil {
		return BoundedResults{}, err
	}
	p.Progress = watching(ctx, ix.searchFunc(p))
	r, err := ix.SearchBounds(queries, p)
	return r, withCause(ctx, err)
}

// LoadContext is Load, stopped when gctx is done while the file's checksums are checked
// (PhaseVerify reports reach the context's ProgressFunc meanwhile); a stopped load returns
// no index.
func LoadContext(gctx context.Context, ctx *Context, path string, mmap bool) (*Index, error) {
	flags := C.int32_t(0)
	if mmap {
		flags = C.VLCC_LOAD_FLAG_MMAP
	}
	return loadWatched(gctx, ctx, path, flags)
}

// LoadDeferredContext is LoadDeferred, stopped when gctx is done (as LoadContext).
func LoadDeferredContext(gctx context.Context, ctx *Context, path string) (*Index, error) {
	return loadWatched(gctx, ctx, path, C.VLCC_LOAD_FLAG_MMAP|C.VLCC_LOAD_FLAG_DEFER_CHECKSUMS)
}

func loadWatched(gctx context.Context, ctx *Context, path string, flags C.int32_t) (*Index, error) {
	if err := doneBefore(gctx); err != nil {
		return nil, err
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	h := cgo.NewHandle(watching(gctx, ctx.progressFunc()))
	defer h.Delete()
	var p *C.vlcc_index
	err := call(func() C.vlcc_status { return C.load_watched(ctx.p, cp, flags, C.uintptr_t(h), &p) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, withCause(gctx, err)
	}
	return newIndex(p, ctx)
}

// VerifyContext is Verify, stopped when ctx is done (as LoadContext; the index's
// ProgressFunc, else the context's, hears it).
func (ix *Index) VerifyContext(ctx context.Context) error {
	if err := doneBefore(ctx); err != nil {
		return err
	}
	fn, _ := ix.progress.get()
	if fn == nil {
		fn = ix.ctx.progressFunc()
	}
	h := cgo.NewHandle(watching(ctx, fn))
	defer h.Delete()
	err := ix.call(func(p *C.vlcc_index) C.vlcc_status { return C.verify_watched(p, C.uintptr_t(h)) })
	return withCause(ctx, err)
}
