// Compressor: training parameters, a codebook, encoding and decoding.

package vlccompress

/*
#include <stdint.h>
#include <stdlib.h>
#include "vlc_compress.h"

// A device address travels as an integer: it is not Go memory, and no Go pointer holds it.
static vlcc_status encode_device(const vlcc_compressor* c, uintptr_t x, size_t n, uint8_t* out,
                                 size_t out_len) {
	return vlcc_compressor_encode_device(c, (const float*)x, n, out, out_len);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Compressor holds training parameters and, once trained, a codebook.
type Compressor struct {
	// mu guards p: encode-side calls hold it shared; Train, SetParam, SetProgress, the
	// Context variants and Close hold it exclusively, so Close waits for the calls in flight.
	mu  sync.RWMutex
	p   *C.vlcc_compressor
	ctx *Context
	// progress is the ProgressFunc set with SetProgress (progress.go).
	progress listener
}

// NewCompressor makes an untrained compressor with default parameters.
func NewCompressor(ctx *Context) (*Compressor, error) {
	return openCompressor(ctx, func(out **C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_new(ctx.p, out)
	})
}

// LoadCodebook makes a trained compressor from a codebook or index file.
func LoadCodebook(ctx *Context, path string) (*Compressor, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	return openCompressor(ctx, func(out **C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_load_codebook(ctx.p, cp, out)
	})
}

// DeserializeCodebook makes a trained compressor from SerializeCodebook's bytes (or an index's).
func DeserializeCodebook(ctx *Context, b []byte) (*Compressor, error) {
	var bp *C.uint8_t
	if len(b) > 0 {
		bp = (*C.uint8_t)(unsafe.Pointer(&b[0]))
	}
	c, err := openCompressor(ctx, func(out **C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_deserialize_codebook(ctx.p, bp, C.size_t(len(b)), out)
	})
	runtime.KeepAlive(b)
	return c, err
}

// openCompressor wraps the compressor that open makes on ctx.
func openCompressor(ctx *Context, open func(out **C.vlcc_compressor) C.vlcc_status) (*Compressor, error) {
	// The handle lands in a local first: cgo refuses a pointer into a struct that holds
	// Go pointers.
	var p *C.vlcc_compressor
	err := call(func() C.vlcc_status { return open(&p) })
	runtime.KeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	c := &Compressor{p: p, ctx: ctx}
	runtime.SetFinalizer(c, (*Compressor).Close)
	return c, nil
}

// Fingerprint is a hash of the codebook's contents: indexes on equal fingerprints merge.
func (c *Compressor) Fingerprint() (uint64, error) {
	var f C.uint64_t
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_fingerprint(h, &f) })
	runtime.KeepAlive(c)
	return uint64(f), err
}

// TrainReport is what the last training measured.
type TrainReport struct {
	Energy          float64 // mean squared distance of the training vectors to their anchor
	MaxListOverMean float64 // largest anchor load over the mean load
	Iterations      uint64  // anchor iterations run
	Seconds         float64 // anchors and residual codebooks together
}

// TrainReport returns what the last Train measured.
func (c *Compressor) TrainReport() (TrainReport, error) {
	var r C.vlcc_train_report
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_train_report(h, &r) })
	runtime.KeepAlive(c)
	return TrainReport{float64(r.energy), float64(r.max_list_over_mean), uint64(r.iterations), float64(r.seconds)}, err
}

// Anchors returns the trained anchors (the lists' centroids), anchors x Dim() floats, row-major.
func (c *Compressor) Anchors() ([]float32, error) {
	var n C.size_t
	if err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_anchors(h, nil, 0, &n) }); err != nil {
		return nil, err
	}
	d, err := c.Dim()
	if err != nil {
		return nil, err
	}
	out := make([]float32, int(n)*d)
	err = c.call(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_anchors(h, floatPtr(out), C.size_t(len(out)), &n)
	})
	runtime.KeepAlive(c)
	return out, err
}

// SerializeCodebook returns the codebook's bytes (those of its file).
func (c *Compressor) SerializeCodebook() ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.p == nil {
		return nil, errClosedCompressor
	}
	return takeBuffer(func(b *C.vlcc_buffer) C.vlcc_status { return C.vlcc_compressor_serialize_codebook(c.p, b) })
}

// takeBuffer copies out the library-owned buffer that fill makes, and releases it.
func takeBuffer(fill func(*C.vlcc_buffer) C.vlcc_status) ([]byte, error) {
	var b C.vlcc_buffer
	if err := call(func() C.vlcc_status { return fill(&b) }); err != nil {
		return nil, err
	}
	defer C.vlcc_buffer_free(&b)
	return C.GoBytes(unsafe.Pointer(b.data), C.int(b.len)), nil
}

// Close frees the compressor once the calls in flight have returned; later calls answer
// ErrInvalidState. Indexes made from it stay valid. Safe to call twice and from several
// goroutines.
func (c *Compressor) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p != nil {
		C.vlcc_compressor_free(c.p)
		c.p = nil
		c.progress.set(nil)
	}
	return nil
}

// errClosedCompressor answers calls on a closed compressor.
var errClosedCompressor = &Error{Status: StatusInvalidState, Message: "the compressor is closed"}

// call runs f on the compressor's handle with the handle held shared (see mu).
func (c *Compressor) call(f func(h *C.vlcc_compressor) C.vlcc_status) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.p == nil {
		return errClosedCompressor
	}
	return call(func() C.vlcc_status { return f(c.p) })
}

// exclusive runs f on the compressor's handle with the handle held exclusively (see mu).
func (c *Compressor) exclusive(f func(h *C.vlcc_compressor) C.vlcc_status) error {
	return c.locked(func(h *C.vlcc_compressor) error {
		return call(func() C.vlcc_status { return f(h) })
	})
}

// locked runs f on the compressor's handle held exclusively; f makes its own calls (and
// reads each one's message before its next call, which would clear it).
func (c *Compressor) locked(f func(h *C.vlcc_compressor) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p == nil {
		return errClosedCompressor
	}
	return f(c.p)
}

// SetParam sets a training parameter; a value out of range is an error and changes nothing.
func (c *Compressor) SetParam(p Param, v float64) error {
	err := c.exclusive(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_set_param(h, C.uint32_t(p), C.double(v))
	})
	runtime.KeepAlive(c)
	return err
}

// ParamBounds is what a training parameter accepts: Min and Max both included, whole numbers
// only where Whole, and its default.
type ParamBounds struct {
	Min, Max, Default float64
	Whole             bool
}

// Bounds tells what parameter p accepts and its default.
func (p Param) Bounds() (ParamBounds, error) {
	var lo, hi, def C.double
	var whole C.uint32_t
	err := call(func() C.vlcc_status { return C.vlcc_param_bounds(C.uint32_t(p), &lo, &hi, &def, &whole) })
	return ParamBounds{Min: float64(lo), Max: float64(hi), Default: float64(def), Whole: whole != 0}, err
}

// Param reads a training parameter.
func (c *Compressor) Param(p Param) (float64, error) {
	var v C.double
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_get_param(h, C.uint32_t(p), &v) })
	runtime.KeepAlive(c)
	return float64(v), err
}

func floatPtr(x []float32) *C.float {
	if len(x) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&x[0]))
}

// Train learns a codebook from len(x)/d vectors of dimension d (x is row-major).
func (c *Compressor) Train(x []float32, d int) error {
	return c.train(x, d, c.exclusive)
}

// compressorRun runs one C call on a compressor's handle: c.call, c.exclusive, or a
// Context variant's c.inContext(ctx).
type compressorRun func(func(h *C.vlcc_compressor) C.vlcc_status) error

// train is Train with its C call run through via.
func (c *Compressor) train(x []float32, d int, via compressorRun) error {
	if err := trainShape(x, d); err != nil {
		return err
	}
	err := via(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_train(h, floatPtr(x), C.size_t(len(x)/d), C.size_t(d))
	})
	runtime.KeepAlive(x)
	runtime.KeepAlive(c)
	return err
}

// EstimateMemory is the working memory, in bytes, that training n x d vectors with this
// compressor's parameters on its context takes at its peak (the input excluded), on the host
// and on the device (0 on the CPU): what the context's memory cap is checked against.
func (c *Compressor) EstimateMemory(n, d int) (host, device uint64, err error) {
	if n < 0 || d < 0 {
		return 0, 0, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("n = %d, d = %d: must be >= 0", n, d)}
	}
	var h, dv C.uint64_t
	err = c.call(func(p *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_estimate_memory(p, C.size_t(n), C.size_t(d), &h, &dv)
	})
	return uint64(h), uint64(dv), err
}

// Work is what a memory estimate is for.
type Work uint32

const (
	WorkTrain  Work = C.VLCC_WORK_TRAIN  // training on n vectors
	WorkBuild  Work = C.VLCC_WORK_BUILD  // adding n vectors in one call
	WorkSearch Work = C.VLCC_WORK_SEARCH // a search: of an index of n vectors, or of n queries
)

// EstimateMemoryFor is the memory, in bytes, that work takes at its peak with this
// compressor's parameters on its context, for n vectors of d dimensions, on the host and on
// the device (0 on the CPU): WorkTrain, training on n vectors; WorkBuild, adding n vectors
// to an empty index in one call; WorkSearch, the first search of an index of n vectors (its
// tables and fast-scan blocks, and a block of queries per thread; results add 12 bytes
// each). What the context's memory cap is checked against.
func (c *Compressor) EstimateMemoryFor(work Work, n, d int) (host, device uint64, err error) {
	if n < 0 || d < 0 {
		return 0, 0, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("n = %d, d = %d: must be >= 0", n, d)}
	}
	var h, dv C.uint64_t
	err = c.call(func(p *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_estimate_memory(p, C.uint32_t(work), C.size_t(n), C.size_t(d), &h, &dv)
	})
	return uint64(h), uint64(dv), err
}

// trainShape refuses values that are not whole rows of dimension d.
func trainShape(x []float32, d int) error {
	if d <= 0 || len(x)%d != 0 {
		return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("%d values are not rows of dimension %d", len(x), d)}
	}
	return nil
}

// Dim is the vector dimension of the trained codebook.
func (c *Compressor) Dim() (int, error) {
	var d C.size_t
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_dim(h, &d) })
	runtime.KeepAlive(c)
	return int(d), err
}

// CodecSize is the number of bytes Encode writes per vector.
func (c *Compressor) CodecSize() (int, error) {
	var s C.size_t
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_codec_size(h, &s) })
	runtime.KeepAlive(c)
	return int(s), err
}

// rows is the number of whole rows in values floats (or halves), refusing a partial row.
func (c *Compressor) rows(values int) (int, error) {
	d, err := c.Dim()
	if err != nil {
		return 0, err
	}
	if values%d != 0 {
		return 0, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("%d values are not rows of dimension %d", values, d)}
	}
	return values / d, nil
}

// Encode returns CodecSize() bytes per vector of x.
func (c *Compressor) Encode(x []float32) ([]byte, error) {
	return c.encode(x, c.call)
}

// encode is Encode with its C call run through via.
func (c *Compressor) encode(x []float32, via compressorRun) ([]byte, error) {
	n, err := c.rows(len(x))
	if err != nil {
		return nil, err
	}
	cs, err := c.CodecSize()
	if err != nil {
		return nil, err
	}
	out := make([]byte, n*cs)
	if err := c.encodeInto(x, out, via); err != nil {
		return nil, err
	}
	return out, nil
}

// EncodeF16 returns the codes of x given as IEEE half-precision bit patterns.
func (c *Compressor) EncodeF16(x []uint16) ([]byte, error) {
	n, err := c.rows(len(x))
	if err != nil {
		return nil, err
	}
	cs, err := c.CodecSize()
	if err != nil {
		return nil, err
	}
	out := make([]byte, n*cs)
	var xp *C.uint16_t
	var op *C.uint8_t
	if n > 0 {
		xp = (*C.uint16_t)(unsafe.Pointer(&x[0]))
		op = (*C.uint8_t)(unsafe.Pointer(&out[0]))
	}
	err = c.call(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_encode_f16(h, xp, C.size_t(n), op, C.size_t(len(out)))
	})
	runtime.KeepAlive(x)
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EncodeInto writes the codes of x into out (at least rows*CodecSize() bytes), without copies.
func (c *Compressor) EncodeInto(x []float32, out []byte) error {
	return c.encodeInto(x, out, c.call)
}

// encodeInto is EncodeInto with its C call run through via.
func (c *Compressor) encodeInto(x []float32, out []byte, via compressorRun) error {
	n, err := c.rows(len(x))
	if err != nil {
		return err
	}
	var op *C.uint8_t
	if len(out) > 0 {
		op = (*C.uint8_t)(unsafe.Pointer(&out[0]))
	}
	err = via(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_encode(h, floatPtr(x), C.size_t(n), op, C.size_t(len(out)))
	})
	runtime.KeepAlive(x)
	runtime.KeepAlive(out)
	runtime.KeepAlive(c)
	return err
}

// EncodeDevice returns the codes of n vectors already in CUDA device memory at address x (a
// CUdeviceptr, or a framework tensor's data pointer on the context's device), read in place:
// only the codes cross to the host. The context must run on CUDA (else
// StatusBackendUnavailable); a range that is not device memory of its device is
// StatusInvalidArgument. Nothing may write the vectors during the call.
func (c *Compressor) EncodeDevice(x uintptr, n int) ([]byte, error) {
	cs, err := c.CodecSize()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("%d vectors", n)}
	}
	out := make([]byte, n*cs)
	var op *C.uint8_t
	if len(out) > 0 {
		op = (*C.uint8_t)(unsafe.Pointer(&out[0]))
	}
	err = c.call(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.encode_device(h, C.uintptr_t(x), C.size_t(n), op, C.size_t(len(out)))
	})
	runtime.KeepAlive(c)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Decode returns the approximate vectors of codes (whole codes of CodecSize bytes each).
func (c *Compressor) Decode(codes []byte) ([]float32, error) {
	n, d, err := c.decodeShape(codes)
	if err != nil {
		return nil, err
	}
	out := make([]float32, n*d)
	if err := c.decodeInto(codes, n, out); err != nil {
		return nil, err
	}
	return out, nil
}

// DecodeInto is Decode writing into out, which must hold Dim values per code exactly (no
// allocation per call).
func (c *Compressor) DecodeInto(codes []byte, out []float32) error {
	n, d, err := c.decodeShape(codes)
	if err != nil {
		return err
	}
	if len(out) != n*d {
		return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("out holds %d values; %d codes of dimension %d need %d", len(out), n, d, n*d)}
	}
	return c.decodeInto(codes, n, out)
}

// decodeShape is the number of whole codes in codes and the dimension they decode to.
func (c *Compressor) decodeShape(codes []byte) (int, int, error) {
	cs, err := c.CodecSize()
	if err != nil {
		return 0, 0, err
	}
	d, err := c.Dim()
	if err != nil {
		return 0, 0, err
	}
	if len(codes)%cs != 0 {
		return 0, 0, &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf("%d bytes are not codes of %d bytes", len(codes), cs)}
	}
	return len(codes) / cs, d, nil
}

func (c *Compressor) decodeInto(codes []byte, n int, out []float32) error {
	if n == 0 {
		return nil
	}
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status {
		return C.vlcc_compressor_decode(h, (*C.uint8_t)(unsafe.Pointer(&codes[0])), C.size_t(n), floatPtr(out), C.size_t(len(out)))
	})
	runtime.KeepAlive(codes)
	runtime.KeepAlive(c)
	return err
}

// SaveCodebook writes the codebook to path atomically.
func (c *Compressor) SaveCodebook(path string) error {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	err := c.call(func(h *C.vlcc_compressor) C.vlcc_status { return C.vlcc_compressor_save_codebook(h, cp) })
	runtime.KeepAlive(c)
	return err
}
