package vlccompress

/*
#include <stdint.h>
#include "vlc_compress.h"
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"unsafe"
)

// Filter limits a search to some ids; make one with FilterBitset, FilterIDs or FilterFunc and
// set it as SearchParams.Filter. It is applied during the scan: a query gets K hits whenever
// its probed lists hold K allowed vectors; fewer leave the last slots NoID (distance NaN).
// Bitsets and id lists are applied in the device scan on CUDA and WGPU contexts; a FilterFunc
// search scans on the host (and calls into Go once per candidate), whatever the backend.
type Filter struct {
	bits  []byte
	nBits uint64
	ids   []uint64
	fn    func(id uint64) bool
}

// FilterBitset allows the ids in [0, nBits) whose bit is set: bit i%8 (least significant
// first) of bits[i/8]. bits must hold (nBits+7)/8 bytes.
func FilterBitset(bits []byte, nBits uint64) *Filter { return &Filter{bits: bits, nBits: nBits} }

// FilterIDs allows exactly ids, which must be sorted ascending.
func FilterIDs(ids []uint64) *Filter { return &Filter{ids: ids} }

// FilterFunc allows the ids for which allow returns true. It is called from several threads
// at once during the search; a panic in it fails the search with ErrCallbackFailed.
func FilterFunc(allow func(id uint64) bool) *Filter { return &Filter{fn: allow} }

// check refuses a bitset shorter than its bit count says (the library would read past it).
func (f *Filter) check() error {
	if f == nil || f.fn != nil || f.ids != nil {
		return nil
	}
	if need := (f.nBits + 7) / 8; uint64(len(f.bits)) < need {
		return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("FilterBitset: %d bits need %d bytes, %d given", f.nBits, need, len(f.bits))}
	}
	return nil
}

//export vlccGoFilter
func vlccGoFilter(user unsafe.Pointer, id C.uint64_t) (r C.int) {
	defer func() {
		if recover() != nil {
			r = -1
		}
	}()
	if cgo.Handle(uintptr(user)).Value().(func(uint64) bool)(uint64(id)) {
		return 1
	}
	return 0
}

// Fetch writes the raw vectors of ids into out (len(ids) x Dim(), in order) for a re-rank, from
// wherever the caller keeps them: SearchParams.Fetch, used instead of Raw. It is called once per
// query, from several threads at once; an error or a panic fails the search with
// ErrCallbackFailed.
type Fetch func(ids []uint64, out []float32) error

// fetchCall is what a fetch's handle holds: the func and the row width.
type fetchCall struct {
	f Fetch
	d int
}

//export vlccGoFetch
func vlccGoFetch(user unsafe.Pointer, ids *C.uint64_t, n C.size_t, out *C.float) (r C.int) {
	defer func() {
		if recover() != nil {
			r = -1
		}
	}()
	c := cgo.Handle(uintptr(user)).Value().(fetchCall)
	if n == 0 {
		return 0
	}
	idv := unsafe.Slice((*uint64)(unsafe.Pointer(ids)), int(n))
	outv := unsafe.Slice((*float32)(unsafe.Pointer(out)), int(n)*c.d)
	if c.f(idv, outv) != nil {
		return -1
	}
	return 0
}

//export vlccGoProgress
func vlccGoProgress(user unsafe.Pointer, phase C.vlcc_phase, done, total C.uint64_t) (r C.int) {
	f, ok := progressFunc(uintptr(user))
	if !ok {
		return 0
	}
	defer func() {
		if recover() != nil {
			r = 1
		}
	}()
	if f(Phase(phase), uint64(done), uint64(total)) {
		return 0
	}
	return 1
}

// progressFunc looks up a handle; one deleted while a call ran is reported as absent.
func progressFunc(h uintptr) (f ProgressFunc, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	f, ok = cgo.Handle(h).Value().(ProgressFunc)
	return
}
