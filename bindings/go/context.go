// Context: a backend, its device and a thread pool.

package vlccompress

/*
#include <stdint.h>
#include <stdlib.h>
#include "vlc_compress.h"
*/
import "C"

import (
	"fmt"
	"runtime"
)

// Context is a backend, its device and a thread pool, shared by what is made from it.
type Context struct {
	p *C.vlcc_context
	// progress is the ProgressFunc set with SetProgress (progress.go).
	progress listener
}

// NewContext opens a backend; threads = 0 uses every core. Auto falls back to the CPU.
func NewContext(b Backend, device, threads int) (*Context, error) {
	if device < 0 || threads < 0 {
		return nil, &Error{Status: StatusInvalidArgument, Message: "device and threads must be >= 0"}
	}
	// The handle lands in a local first: cgo refuses a pointer into a struct that holds
	// Go pointers.
	var p *C.vlcc_context
	if err := call(func() C.vlcc_status {
		return C.vlcc_context_new(C.uint32_t(b), C.uint32_t(device), C.size_t(threads), &p)
	}); err != nil {
		return nil, err
	}
	c := &Context{p: p}
	runtime.SetFinalizer(c, (*Context).Close)
	return c, nil
}

// Close releases this reference to the context. Safe to call twice. Objects made from it
// keep working; its ProgressFunc is no longer called.
func (c *Context) Close() error {
	if c != nil && c.p != nil {
		C.vlcc_context_set_progress(c.p, nil, nil)
		C.vlcc_context_free(c.p)
		c.p = nil
		c.progress.set(nil)
	}
	return nil
}

// Backend reports the backend the context runs on (Auto resolved).
func (c *Context) Backend() (Backend, error) {
	var b C.uint32_t
	err := call(func() C.vlcc_status { return C.vlcc_context_backend(c.p, &b) })
	runtime.KeepAlive(c)
	return Backend(b), err
}

// Threads is the number of CPU threads the context's pool runs.
func (c *Context) Threads() (int, error) {
	var n C.size_t
	err := call(func() C.vlcc_status { return C.vlcc_context_threads(c.p, &n) })
	runtime.KeepAlive(c)
	return int(n), err
}

// SetMemoryCap caps the host memory one call allocates, in bytes (0 = no cap): training,
// encoding, adding, merging and searching check their estimate first and fail with
// ErrOutOfMemory where it does not fit; a search goes without its tables where they do not,
// and training on the CPU trains fewer sub-quantizers at once, then rebuilds the codebooks'
// residuals where they are read, where that fits (the same codebook).
func (c *Context) SetMemoryCap(bytes int) error {
	if bytes < 0 {
		return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("memory cap %d: must be >= 0", bytes)}
	}
	err := call(func() C.vlcc_status { return C.vlcc_context_set_memory_cap(c.p, C.size_t(bytes)) })
	runtime.KeepAlive(c)
	return err
}

// SetExactRotation with true makes host searches rotate every query in f32 products. By
// default (false) a CPU with AVX-512 VNNI takes them in 8-bit integers where the codes hold
// at most one bit a dimension: faster, within a bound the distance bounds take in, but a
// result near a tie can differ from another CPU's. Exact rotation gives every CPU the same
// results up to the rounding of the sums.
func (c *Context) SetExactRotation(exact bool) error {
	v := C.int(0)
	if exact {
		v = 1
	}
	err := call(func() C.vlcc_status { return C.vlcc_context_set_exact_rotation(c.p, v) })
	runtime.KeepAlive(c)
	return err
}

// SetDeviceMemoryCap caps the device memory one call takes on a GPU backend, in bytes (0 = no
// cap): calls check their device estimate first and fail with ErrOutOfMemory where it does
// not fit; training whose points do not fit streams them a block at a time. No effect on the
// CPU backend.
func (c *Context) SetDeviceMemoryCap(bytes int) error {
	if bytes < 0 {
		return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("device memory cap %d: must be >= 0", bytes)}
	}
	err := call(func() C.vlcc_status { return C.vlcc_context_set_device_memory_cap(c.p, C.size_t(bytes)) })
	runtime.KeepAlive(c)
	return err
}
