// Index: a compressed index, its contents, files and memory.

package vlccompress

/*
#include <stdint.h>
#include <stdlib.h>
#include "vlc_compress.h"

// A device address travels as an integer: it is not Go memory, and no Go pointer holds it.
static vlcc_status index_add_device(vlcc_index* ix, uintptr_t x, size_t n, const uint64_t* ids) {
	return vlcc_index_add_device(ix, (const float*)x, n, ids);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Index is a searchable compressed index.
type Index struct {
	// mu guards p: calls hold it shared, Close exclusively, so Close waits for the calls in
	// flight and no call sees a freed handle.
	mu  sync.RWMutex
	p   *C.vlcc_index
	dim int
	ctx *Context
	// progress is the ProgressFunc set with SetProgress (progress.go).
	progress listener
}

func newIndex(p *C.vlcc_index, ctx *Context) (*Index, error) {
	ix := &Index{p: p, ctx: ctx}
	var d C.size_t
	if err := call(func() C.vlcc_status { return C.vlcc_index_dim(p, &d) }); err != nil {
		C.vlcc_index_free(p)
		return nil, err
	}
	ix.dim = int(d)
	runtime.SetFinalizer(ix, (*Index).Close)
	return ix, nil
}

// NewIndex makes an empty index on the compressor's codebook.
func NewIndex(c *Compressor) (*Index, error) {
	var p *C.vlcc_index
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_index_new(h, &p) })
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newIndex(p, c.ctx)
}

// Refine is the kind of refinement vectors an index keeps beside its codes.
type Refine uint32

// Refinement kinds (see the C header): none, half-precision vectors, or what each code misses
// in 8 bits per value.
const (
	RefineNone Refine = C.VLCC_REFINE_NONE
	RefineF16  Refine = C.VLCC_REFINE_F16
	RefineInt8 Refine = C.VLCC_REFINE_INT8
	// RefineBound keeps the error bounds alone (2 bytes a vector): SearchBounds and
	// RerankAuto, no refined re-rank.
	RefineBound Refine = C.VLCC_REFINE_BOUND
)

// NewIndexWithRefine is NewIndex keeping refinement vectors of kind r: a search with Rerank > 0
// and neither Raw nor Fetch then re-ranks against them. They are saved, loaded, removed and
// merged with the index.
func NewIndexWithRefine(c *Compressor, r Refine) (*Index, error) {
	var p *C.vlcc_index
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_index_new_with_refine(h, C.uint32_t(r), &p) })
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return newIndex(p, c.ctx)
}

// Refine is the kind of refinement vectors the index keeps.
func (ix *Index) Refine() (Refine, error) {
	var r C.uint32_t
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_refine(h, &r) })
	return Refine(r), err
}

// Load opens an index file; with mmap, ids and codes are used in place from the file.
func Load(ctx *Context, path string, mmap bool) (*Index, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	m := C.int32_t(0)
	if mmap {
		m = 1
	}
	var p *C.vlcc_index
	err := call(func() C.vlcc_status { return C.vlcc_index_load(ctx.p, cp, m, &p) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	return newIndex(p, ctx)
}

// LoadDeferred maps an index file checking its structure, codebook and ids but not the
// checksums of its codes: a large file opens without reading its codes' pages. Verify
// checks the rest.
func LoadDeferred(ctx *Context, path string) (*Index, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var p *C.vlcc_index
	flags := C.int32_t(C.VLCC_LOAD_FLAG_MMAP | C.VLCC_LOAD_FLAG_DEFER_CHECKSUMS)
	err := call(func() C.vlcc_status { return C.vlcc_index_load(ctx.p, cp, flags, &p) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	return newIndex(p, ctx)
}

// Verify checks every checksum of a memory-mapped index's file (ErrCorrupt names the first
// damaged section); an index held in memory has nothing to check.
func (ix *Index) Verify() error {
	return ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_verify(h) })
}

// MemoryUsage is an index's memory by part, in bytes; parts built on demand read 0 until
// built (the search tables and fast-scan blocks by the first search, the id map by the first
// access by id).
type MemoryUsage struct {
	Codes, IDs, Refine, IDMap, SearchTables, FastScanBlocks uint64
	MemoryMapped                                            bool
}

// MemoryUsage reports the index's memory by part.
func (ix *Index) MemoryUsage() (MemoryUsage, error) {
	var m C.vlcc_index_memory
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_memory_usage(h, &m) })
	return MemoryUsage{uint64(m.codes), uint64(m.ids), uint64(m.refine), uint64(m.id_map),
		uint64(m.search_tables), uint64(m.fast_scan_blocks), m.memory_mapped != 0}, err
}

// EstimateMemory is the memory, in bytes, that work on this index takes at its peak, on the
// host and on the device (0 on the CPU): WorkBuild, adding n vectors in one call; WorkSearch,
// searching n queries with p's K, NProbe and Rerank (its working memory and results, and the
// tables and fast-scan blocks it builds where the index has none yet). What the context's
// memory cap is checked against. WorkTrain is ErrInvalidArgument.
func (ix *Index) EstimateMemory(work Work, n int, p SearchParams) (host, device uint64, err error) {
	if n < 0 || p.K < 0 || p.NProbe < 0 || p.Rerank < 0 {
		return 0, 0, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("n = %d, K = %d, NProbe = %d, Rerank = %d: must be >= 0", n, p.K, p.NProbe, p.Rerank)}
	}
	var h, dv C.uint64_t
	err = ix.call(func(x *C.vlcc_index) C.vlcc_status {
		var sp *C.vlcc_search_params
		if s := C.vlcc_search_params_new(&sp); s != C.VLCC_STATUS_OK {
			return s
		}
		defer C.vlcc_search_params_free(sp)
		if work == WorkSearch {
			if s := setSearchNumbers(sp, p.K, p.NProbe, p.Rerank); s != C.VLCC_STATUS_OK {
				return s
			}
		}
		return C.vlcc_index_estimate_memory(x, C.uint32_t(work), C.size_t(n), sp, &h, &dv)
	})
	return uint64(h), uint64(dv), err
}

// Deserialize makes an index on ctx from Serialize's bytes (copied).
func Deserialize(ctx *Context, b []byte) (*Index, error) {
	var bp *C.uint8_t
	if len(b) > 0 {
		bp = (*C.uint8_t)(unsafe.Pointer(&b[0]))
	}
	var p *C.vlcc_index
	err := call(func() C.vlcc_status { return C.vlcc_index_deserialize(ctx.p, bp, C.size_t(len(b)), &p) })
	runtime.KeepAlive(b)
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	return newIndex(p, ctx)
}

// Close frees the index once the calls in flight have returned; later calls answer
// ErrInvalidState. Safe to call twice and from several goroutines.
func (ix *Index) Close() error {
	if ix == nil {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.p != nil {
		C.vlcc_index_free(ix.p)
		ix.p = nil
		ix.progress.set(nil)
	}
	return nil
}

// call runs f on the index's handle with the handle held shared (see mu).
func (ix *Index) call(f func(h *C.vlcc_index) C.vlcc_status) error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.p == nil {
		return errClosed
	}
	return call(func() C.vlcc_status { return f(ix.p) })
}

// exclusive runs f on the index's handle with the handle held exclusively (see mu).
func (ix *Index) exclusive(f func(h *C.vlcc_index) C.vlcc_status) error {
	return ix.locked(func(h *C.vlcc_index) error {
		return call(func() C.vlcc_status { return f(h) })
	})
}

// locked is Compressor.locked for an index.
func (ix *Index) locked(f func(h *C.vlcc_index) error) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.p == nil {
		return errClosed
	}
	return f(ix.p)
}

// addShape says why values do not make one row of dimension d per id.
func addShape(values, ids, d int) string {
	return fmt.Sprintf("%d values for %d ids of dimension %d", values, ids, d)
}

// errClosed answers calls on a closed index.
var errClosed = &Error{Status: StatusInvalidState, Message: "the index is closed"}

// Dim is the vector dimension.
func (ix *Index) Dim() int { return ix.dim }

// Add encodes len(ids) vectors and stores them under ids.
func (ix *Index) Add(x []float32, ids []uint64) error {
	err := ix.add(len(x), ids, ix.call, func(h *C.vlcc_index, idp *C.uint64_t) C.vlcc_status {
		return C.vlcc_index_add(h, floatPtr(x), C.size_t(len(ids)), idp)
	})
	runtime.KeepAlive(x)
	return err
}

// indexRun runs one C call on an index's handle: ix.call, ix.exclusive, or a Context
// variant's ix.inContext(ctx).
type indexRun func(func(h *C.vlcc_index) C.vlcc_status) error

// add checks that values make one row per id and runs one add call with the ids through via.
func (ix *Index) add(values int, ids []uint64, via indexRun, run func(h *C.vlcc_index, ids *C.uint64_t) C.vlcc_status) error {
	if values != len(ids)*ix.dim {
		return &Error{Status: StatusInvalidArgument, Message: addShape(values, len(ids), ix.dim)}
	}
	if len(ids) == 0 {
		return nil
	}
	err := via(func(h *C.vlcc_index) C.vlcc_status { return run(h, idsPtr(ids)) })
	runtime.KeepAlive(ids)
	return err
}

// AddDevice encodes len(ids) vectors already in CUDA device memory at address x (as
// Compressor.EncodeDevice) and stores them under ids. The context must run on CUDA.
func (ix *Index) AddDevice(x uintptr, ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
		return C.index_add_device(h, C.uintptr_t(x), C.size_t(len(ids)), idsPtr(ids))
	})
	runtime.KeepAlive(ids)
	runtime.KeepAlive(ix)
	return err
}

// Remove drops every vector whose id is in ids and returns how many were removed.
func (ix *Index) Remove(ids []uint64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var n C.size_t
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
		return C.vlcc_index_remove(h, idsPtr(ids), C.size_t(len(ids)), &n)
	})
	runtime.KeepAlive(ids)
	runtime.KeepAlive(ix)
	return int(n), err
}

// Len is the number of vectors held.
func (ix *Index) Len() (int, error) {
	var n C.size_t
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_size(h, &n) })
	runtime.KeepAlive(ix)
	return int(n), err
}

// AddF16 is Add for vectors given as IEEE half-precision bit patterns.
func (ix *Index) AddF16(x []uint16, ids []uint64) error {
	err := ix.add(len(x), ids, ix.call, func(h *C.vlcc_index, idp *C.uint64_t) C.vlcc_status {
		return C.vlcc_index_add_f16(h, (*C.uint16_t)(unsafe.Pointer(&x[0])), C.size_t(len(ids)), idp)
	})
	runtime.KeepAlive(x)
	return err
}

// Merge appends every vector of other, which must be built on the same codebook
// (StatusCodebookMismatch otherwise).
func (ix *Index) Merge(other *Index) error {
	return ix.merge(other, ix.call)
}

// merge is Merge with its C call run through via (merging an index into itself is refused
// without it).
func (ix *Index) merge(other *Index, via indexRun) error {
	if other == ix {
		return ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_merge(h, h) })
	}
	other.mu.RLock()
	defer other.mu.RUnlock()
	if other.p == nil {
		return errClosed
	}
	return via(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_merge(h, other.p) })
}

// IndexStats are an index's sizes and balance.
type IndexStats struct {
	Vectors, Lists, Dim, ResidualCodeSize, LargestList, EmptyLists int
	MaxListOverMean                                                float64 // 1 = perfectly balanced
	MemoryMapped                                                   bool
}

// Stats reports the index's sizes and balance.
func (ix *Index) Stats() (IndexStats, error) {
	var s C.vlcc_index_info
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_stats(h, &s) })
	runtime.KeepAlive(ix)
	return IndexStats{
		Vectors: int(s.vectors), Lists: int(s.lists), Dim: int(s.dim),
		ResidualCodeSize: int(s.residual_code_size), LargestList: int(s.largest_list),
		EmptyLists: int(s.empty_lists), MaxListOverMean: float64(s.max_list_over_mean),
		MemoryMapped: s.memory_mapped != 0,
	}, err
}

// Reconstruct returns every stored vector's id and its approximate vector (decoded from its
// code; Len() x Dim() floats), list by list.
func (ix *Index) Reconstruct() ([]uint64, []float32, error) {
	var n C.size_t
	if err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_reconstruct(h, nil, nil, 0, &n) }); err != nil {
		return nil, nil, err
	}
	ids := make([]uint64, int(n))
	vecs := make([]float32, int(n)*ix.dim)
	if n > 0 {
		err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
			return C.vlcc_index_reconstruct(h, idsPtr(ids), floatPtr(vecs), n, &n)
		})
		if err != nil {
			return nil, nil, err
		}
	}
	runtime.KeepAlive(ix)
	return ids, vecs, nil
}

// idsPtr is the C view of a non-empty id slice.
func idsPtr(ids []uint64) *C.uint64_t { return (*C.uint64_t)(unsafe.Pointer(&ids[0])) }

// Contains reports, for each id, whether the index holds a vector with it. The first call
// that asks by id builds the index's id map; later changes keep it.
func (ix *Index) Contains(ids []uint64) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	flags := make([]C.uint8_t, len(ids))
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
		return C.vlcc_index_contains(h, idsPtr(ids), C.size_t(len(ids)), &flags[0])
	})
	runtime.KeepAlive(ids)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(ids))
	for i, f := range flags {
		out[i] = f != 0
	}
	return out, nil
}

// ReconstructIDs returns the approximate vectors of ids (len(ids) x Dim() floats, in order);
// where several vectors share an id, the first added. An id not held is ErrInvalidArgument.
func (ix *Index) ReconstructIDs(ids []uint64) ([]float32, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out := make([]float32, len(ids)*ix.dim)
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status {
		return C.vlcc_index_reconstruct_ids(h, idsPtr(ids), C.size_t(len(ids)), floatPtr(out))
	})
	runtime.KeepAlive(ids)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CodecSize is the bytes of one code as Codes returns it (anchor id, then residual code).
func (ix *Index) CodecSize() (int, error) {
	var n C.size_t
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_codec_size(h, &n) })
	return int(n), err
}

// Codes returns the codes of ids (len(ids) x CodecSize() bytes, in order), in the form
// Compressor.Encode gives and Compressor.Decode reads; picks and fails as ReconstructIDs.
func (ix *Index) Codes(ids []uint64) ([]byte, error) {
	cs, err := ix.CodecSize()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	out := make([]byte, len(ids)*cs)
	err = ix.call(func(h *C.vlcc_index) C.vlcc_status {
		return C.vlcc_index_get_codes(h, idsPtr(ids), C.size_t(len(ids)), (*C.uint8_t)(unsafe.Pointer(&out[0])))
	})
	runtime.KeepAlive(ids)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Serialize returns the index's bytes (those of its file).
func (ix *Index) Serialize() ([]byte, error) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if ix.p == nil {
		return nil, errClosed
	}
	return takeBuffer(func(b *C.vlcc_buffer) C.vlcc_status { return C.vlcc_index_serialize(ix.p, b) })
}

// Save writes the index to path atomically.
func (ix *Index) Save(path string) error {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	err := ix.call(func(h *C.vlcc_index) C.vlcc_status { return C.vlcc_index_save(h, cp) })
	runtime.KeepAlive(ix)
	return err
}
