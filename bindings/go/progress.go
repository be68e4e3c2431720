package vlccompress

/*
#include <stdint.h>
#include "vlc_compress.h"

// The Go progress trampoline (callbacks.go) and setters taking its handle as an integer
// (0 removes the callback).
extern int vlccGoProgress(void *user, vlcc_phase phase, uint64_t done, uint64_t total);
static vlcc_status set_context_progress(const vlcc_context* c, uintptr_t h) {
	return vlcc_context_set_progress(c, h ? vlccGoProgress : NULL, (void*)h);
}
static vlcc_status set_compressor_progress(vlcc_compressor* c, uintptr_t h) {
	return vlcc_compressor_set_progress(c, h ? vlccGoProgress : NULL, (void*)h);
}
static vlcc_status set_index_progress(vlcc_index* ix, uintptr_t h) {
	return vlcc_index_set_progress(ix, h ? vlccGoProgress : NULL, (void*)h);
}
*/
import "C"

import (
	"context"
	"errors"
	"runtime"
	"runtime/cgo"
	"sync"
)

// Phase names the step of long work a ProgressFunc hears about.
type Phase uint32

// Phases (numbers as in the C header).
const (
	PhaseAnchors   Phase = C.VLCC_PHASE_ANCHORS   // anchor training: done of total iterations
	PhaseCodebooks Phase = C.VLCC_PHASE_CODEBOOKS // residual codebooks: sub-quantizer fits
	PhaseEncode    Phase = C.VLCC_PHASE_ENCODE    // encoding (Encode, Add): rows
	PhaseMerge     Phase = C.VLCC_PHASE_MERGE     // merging: lists
	PhaseSearch    Phase = C.VLCC_PHASE_SEARCH    // searching: queries answered
	PhaseVerify    Phase = C.VLCC_PHASE_VERIFY    // checking checksums (Load, Verify): bytes
)

func (p Phase) String() string {
	switch p {
	case PhaseAnchors:
		return "anchors"
	case PhaseCodebooks:
		return "codebooks"
	case PhaseEncode:
		return "encode"
	case PhaseMerge:
		return "merge"
	case PhaseSearch:
		return "search"
	case PhaseVerify:
		return "verify"
	}
	return "unknown"
}

// ProgressFunc hears done of total in phase during Train, Encode, Add, Merge, searches, Load
// and Verify. Returning
// false cancels the call, which returns ErrCancelled and leaves every object as it was. It is
// called from the library's threads, one call at a time per operation; a panic in it
// cancels too.
type ProgressFunc func(phase Phase, done, total uint64) bool

// listener keeps a ProgressFunc and the handle the library reaches it through.
type listener struct {
	mu sync.Mutex
	fn ProgressFunc
	h  cgo.Handle
}

// set replaces the func (nil clears it) and returns the new handle (0 for none). The old
// handle goes: a call still running with it hears nothing more.
func (l *listener) set(fn ProgressFunc) uintptr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h != 0 {
		l.h.Delete()
		l.h = 0
	}
	l.fn = fn
	if fn != nil {
		l.h = cgo.NewHandle(fn)
	}
	return uintptr(l.h)
}

func (l *listener) get() (ProgressFunc, uintptr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fn, uintptr(l.h)
}

// cancelError is ErrCancelled caused by a done context.Context: errors.Is matches both
// ErrCancelled and the context's error (context.Canceled or DeadlineExceeded).
type cancelError struct {
	lib   *Error
	cause error
}

func (e *cancelError) Error() string        { return e.lib.Error() + " (" + e.cause.Error() + ")" }
func (e *cancelError) Is(target error) bool { return e.lib.Is(target) }
func (e *cancelError) Unwrap() error        { return e.cause }

// As gives the library's *Error to errors.As.
func (e *cancelError) As(target interface{}) bool {
	if t, ok := target.(**Error); ok {
		*t = e.lib
		return true
	}
	return false
}

// watching is the ProgressFunc of one Context call: it stops when ctx is done and passes
// the reports on to fn, if any.
func watching(ctx context.Context, fn ProgressFunc) ProgressFunc {
	return func(p Phase, done, total uint64) bool {
		if ctx.Err() != nil {
			return false
		}
		return fn == nil || fn(p, done, total)
	}
}

// withCause names the context's error in a cancel it caused.
func withCause(ctx context.Context, err error) error {
	var e *Error
	if ctx.Err() != nil && errors.As(err, &e) && e.Status == StatusCancelled {
		return &cancelError{e, ctx.Err()}
	}
	return err
}

// doneBefore answers a Context call whose ctx is done before it starts.
func doneBefore(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	return &cancelError{&Error{Status: StatusCancelled, Message: "the context was done before the call"}, ctx.Err()}
}

// SetProgress makes f hear the long calls of every object made from this context that has
// no ProgressFunc of its own; nil removes it.
func (c *Context) SetProgress(f ProgressFunc) error {
	if c == nil || c.p == nil {
		return &Error{Status: StatusInvalidState, Message: "the context is closed"}
	}
	h := c.progress.set(f)
	return call(func() C.vlcc_status { return C.set_context_progress(c.p, C.uintptr_t(h)) })
}

func (c *Context) progressFunc() ProgressFunc {
	if c == nil {
		return nil
	}
	f, _ := c.progress.get()
	return f
}

// SetProgress makes f hear this compressor's Train and Encode calls (instead of the
// context's ProgressFunc); nil removes it. Exclusive, like Train.
func (c *Compressor) SetProgress(f ProgressFunc) error {
	return c.exclusive(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.set_compressor_progress(h, C.uintptr_t(c.progress.set(f)))
	})
}

// watched runs a call with a watching callback (handle w) in place of the object's own
// (handle own, its func in l, else the context's); run installs w and puts own back.
func watched(ctx context.Context, l *listener, fallback *Context, run func(w, own uintptr) error) error {
	if err := doneBefore(ctx); err != nil {
		return err
	}
	fn, own := l.get()
	if fn == nil {
		fn = fallback.progressFunc()
	}
	w := cgo.NewHandle(watching(ctx, fn))
	defer w.Delete()
	return withCause(ctx, run(uintptr(w), own))
}

// withContext runs f exclusively, hearing progress through a ProgressFunc that cancels
// when ctx is done; the compressor's own callback is back in place afterwards.
func (c *Compressor) withContext(ctx context.Context, f func(h *C.vlcc_compressor) C.vlcc_status) error {
	return watched(ctx, &c.progress, c.ctx, func(w, own uintptr) error {
		return c.locked(func(h *C.vlcc_compressor) error {
			C.set_compressor_progress(h, C.uintptr_t(w))
			// Put back after the call's message is read: a later call clears it.
			defer C.set_compressor_progress(h, C.uintptr_t(own))
			return call(func() C.vlcc_status { return f(h) })
		})
	})
}

// inContext runs a call as withContext does, as a compressorRun.
func (c *Compressor) inContext(ctx context.Context) compressorRun {
	return func(f func(h *C.vlcc_compressor) C.vlcc_status) error { return c.withContext(ctx, f) }
}

// TrainContext is Train, stopped when ctx is done (within one progress step: about a tenth
// of a second of CPU work, or one batch on a GPU). A stopped Train returns an error that
// matches both ErrCancelled and ctx.Err(), and keeps the codebook there was (or none).
func (c *Compressor) TrainContext(ctx context.Context, x []float32, d int) error {
	return c.train(x, d, c.inContext(ctx))
}

// EncodeContext is Encode, stopped when ctx is done, as TrainContext. It runs exclusively:
// other calls on this compressor wait for it.
func (c *Compressor) EncodeContext(ctx context.Context, x []float32) ([]byte, error) {
	return c.encode(x, c.inContext(ctx))
}

// SetProgress makes f hear this index's Add and Merge calls (instead of the context's
// ProgressFunc); nil removes it. Exclusive, like Add.
func (ix *Index) SetProgress(f ProgressFunc) error {
	return ix.exclusive(func(h *C.vlcc_index) C.vlcc_status {
		return C.set_index_progress(h, C.uintptr_t(ix.progress.set(f)))
	})
}

// withContext is Compressor.withContext for an index.
func (ix *Index) withContext(ctx context.Context, f func(h *C.vlcc_index) C.vlcc_status) error {
	return watched(ctx, &ix.progress, ix.ctx, func(w, own uintptr) error {
		return ix.locked(func(h *C.vlcc_index) error {
			C.set_index_progress(h, C.uintptr_t(w))
			// As Compressor.withContext: the message first, then the callback back.
			defer C.set_index_progress(h, C.uintptr_t(own))
			return call(func() C.vlcc_status { return f(h) })
		})
	})
}

// inContext runs a call as withContext does, as an indexRun.
func (ix *Index) inContext(ctx context.Context) indexRun {
	return func(f func(h *C.vlcc_index) C.vlcc_status) error { return ix.withContext(ctx, f) }
}

// AddContext is Add, stopped when ctx is done (as Compressor.TrainContext); a stopped Add
// leaves the index as it was.
func (ix *Index) AddContext(ctx context.Context, x []float32, ids []uint64) error {
	if len(ids) == 0 && len(x) == 0 {
		return doneBefore(ctx)
	}
	err := ix.add(len(x), ids, ix.inContext(ctx), func(h *C.vlcc_index, idp *C.uint64_t) C.vlcc_status {
		return C.vlcc_index_add(h, floatPtr(x), C.size_t(len(ids)), idp)
	})
	runtime.KeepAlive(x)
	return err
}

// MergeContext is Merge, stopped when ctx is done; a stopped Merge leaves the index as it was.
func (ix *Index) MergeContext(ctx context.Context, other *Index) error {
	return ix.merge(other, ix.inContext(ctx))
}
