// Package vlccompress is the Go binding of libvlc_compress: compact codes for float
// embeddings (train a codebook, encode and decode vectors, search a compressed index).
//
// The package finds the library through pkg-config (`vlc_compress.pc`): install the library
// (scripts/install.sh), with PKG_CONFIG_PATH naming the install's lib/pkgconfig if it is not
// a system prefix. The module path is not published yet: require it through a `replace`
// directive naming a clone's bindings/go.
// In the source tree, `export PKG_CONFIG_PATH=$(bash scripts/dev-pkgconfig.sh)` points it at
// target/release.
//
// Every object must be released with Close (a finalizer does it as a last resort). A Context
// may be closed before the objects made from it. Index.Search may be called from many
// goroutines at once; Add, Remove and Close need exclusive access, as do Compressor.Train
// and SetParam. Close waits for the calls in flight on that object.
//
// Long calls report progress to a ProgressFunc (SetProgress on the object or its Context)
// that may cancel them, and have variants taking a context.Context (TrainContext,
// EncodeContext, AddContext, MergeContext, SearchContext, RangeSearchContext,
// SearchBoundsContext, LoadContext, VerifyContext) that stop when it is done; a stopped call
// returns an error matching ErrCancelled (and the context's error) and changes nothing.
// Context.SetTimeout and SearchParams.Timeout stop calls with ErrTimedOut.
package vlccompress

/*
#cgo pkg-config: vlc_compress
#include <stdint.h>
#include <stdlib.h>
#include "vlc_compress.h"

// A device address travels as an integer: it is not Go memory, and no Go pointer holds it.
static vlcc_status encode_device(const vlcc_compressor* c, uintptr_t x, size_t n, uint8_t* out,
                                 size_t out_len) {
	return vlcc_compressor_encode_device(c, (const float*)x, n, out, out_len);
}
static vlcc_status index_add_device(vlcc_index* ix, uintptr_t x, size_t n, const uint64_t* ids) {
	return vlcc_index_add_device(ix, (const float*)x, n, ids);
}
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
	"sync"
	"time"
	"unsafe"
)

// Status is a vlcc_status number; the values never change.
type Status int

// Status values (see the C header for their meaning).
const (
	StatusOK                 Status = C.VLCC_STATUS_OK
	StatusInvalidArgument    Status = C.VLCC_STATUS_INVALID_ARGUMENT
	StatusNullPointer        Status = C.VLCC_STATUS_NULL_POINTER
	StatusBufferTooSmall     Status = C.VLCC_STATUS_BUFFER_TOO_SMALL
	StatusUnaligned          Status = C.VLCC_STATUS_UNALIGNED
	StatusOverlap            Status = C.VLCC_STATUS_OVERLAP
	StatusNonFinite          Status = C.VLCC_STATUS_NON_FINITE
	StatusNotEnoughData      Status = C.VLCC_STATUS_NOT_ENOUGH_DATA
	StatusInvalidState       Status = C.VLCC_STATUS_INVALID_STATE
	StatusCorrupt            Status = C.VLCC_STATUS_CORRUPT
	StatusUnsupportedVersion Status = C.VLCC_STATUS_UNSUPPORTED_VERSION
	StatusCodebookMismatch   Status = C.VLCC_STATUS_CODEBOOK_MISMATCH
	StatusBackendUnavailable Status = C.VLCC_STATUS_BACKEND_UNAVAILABLE
	StatusDeviceError        Status = C.VLCC_STATUS_DEVICE_ERROR
	StatusOutOfMemory        Status = C.VLCC_STATUS_OUT_OF_MEMORY
	StatusIO                 Status = C.VLCC_STATUS_IO
	StatusPanic              Status = C.VLCC_STATUS_PANIC
	StatusCallbackFailed     Status = C.VLCC_STATUS_CALLBACK_FAILED
	StatusCancelled          Status = C.VLCC_STATUS_CANCELLED
	StatusTimedOut           Status = C.VLCC_STATUS_TIMED_OUT
)

// Error carries the status of a failed call and the library's message.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("vlc_compress: %s: %s", C.GoString(C.vlcc_status_str(C.uint32_t(e.Status))), e.Message)
}

// Is makes every error of a status match that status's sentinel below (a sentinel has no
// message): errors.Is(err, ErrInvalidArgument). errors.As(err, &e) still gives the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Status == e.Status
}

// Sentinel errors, one per failing status, for errors.Is.
var (
	ErrInvalidArgument    = &Error{Status: StatusInvalidArgument}
	ErrNullPointer        = &Error{Status: StatusNullPointer}
	ErrBufferTooSmall     = &Error{Status: StatusBufferTooSmall}
	ErrUnaligned          = &Error{Status: StatusUnaligned}
	ErrOverlap            = &Error{Status: StatusOverlap}
	ErrNonFinite          = &Error{Status: StatusNonFinite}
	ErrNotEnoughData      = &Error{Status: StatusNotEnoughData}
	ErrInvalidState       = &Error{Status: StatusInvalidState}
	ErrCorrupt            = &Error{Status: StatusCorrupt}
	ErrUnsupportedVersion = &Error{Status: StatusUnsupportedVersion}
	ErrCodebookMismatch   = &Error{Status: StatusCodebookMismatch}
	ErrBackendUnavailable = &Error{Status: StatusBackendUnavailable}
	ErrDeviceError        = &Error{Status: StatusDeviceError}
	ErrOutOfMemory        = &Error{Status: StatusOutOfMemory}
	ErrIO                 = &Error{Status: StatusIO}
	ErrPanic              = &Error{Status: StatusPanic}
	ErrCallbackFailed     = &Error{Status: StatusCallbackFailed}
	ErrCancelled          = &Error{Status: StatusCancelled}
	ErrTimedOut           = &Error{Status: StatusTimedOut}
)

// call runs f and, on failure, reads the message on the same OS thread: the library keeps
// messages per thread, and a goroutine may otherwise move between the two cgo calls.
func call(f func() C.vlcc_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s := f()
	if s == C.VLCC_STATUS_OK {
		return nil
	}
	var n C.size_t
	C.vlcc_last_error_message(nil, 0, &n)
	buf := make([]byte, int(n)+1)
	C.vlcc_last_error_message((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), nil)
	return &Error{Status: Status(s), Message: string(buf[:n])}
}

// Backend selects where work runs.
type Backend uint32

// Backends.
const (
	Auto Backend = C.VLCC_BACKEND_AUTO
	CPU  Backend = C.VLCC_BACKEND_CPU
	CUDA Backend = C.VLCC_BACKEND_CUDA
	WGPU Backend = C.VLCC_BACKEND_WGPU
)

// Metric values for ParamMetric.
const (
	MetricL2     = float64(C.VLCC_METRIC_L2)
	MetricIP     = float64(C.VLCC_METRIC_INNER_PRODUCT)
	MetricCosine = float64(C.VLCC_METRIC_COSINE)
)

// Param is a training parameter (vlcc_param).
type Param uint32

// Training parameters; see the C header for ranges and defaults.
const (
	ParamAnchors             Param = C.VLCC_PARAM_ANCHORS
	ParamBytesPerVector      Param = C.VLCC_PARAM_BYTES_PER_VECTOR
	ParamBits                Param = C.VLCC_PARAM_BITS
	ParamMetric              Param = C.VLCC_PARAM_METRIC
	ParamRotation            Param = C.VLCC_PARAM_ROTATION
	ParamMaxIters            Param = C.VLCC_PARAM_MAX_ITERS
	ParamSeed                Param = C.VLCC_PARAM_SEED
	ParamPQIters             Param = C.VLCC_PARAM_PQ_ITERS
	ParamMaxPointsPerAnchor  Param = C.VLCC_PARAM_MAX_POINTS_PER_ANCHOR
	ParamInitialTemp         Param = C.VLCC_PARAM_INITIAL_TEMP
	ParamCoolingRate         Param = C.VLCC_PARAM_COOLING_RATE
	ParamTrim                Param = C.VLCC_PARAM_TRIM
	ParamBalance             Param = C.VLCC_PARAM_BALANCE
	ParamMaintenanceInterval Param = C.VLCC_PARAM_MAINTENANCE_INTERVAL
	ParamTol                 Param = C.VLCC_PARAM_TOL
	ParamMergeThreshold      Param = C.VLCC_PARAM_MERGE_THRESHOLD
	ParamSplitFactor         Param = C.VLCC_PARAM_SPLIT_FACTOR
	ParamPQTrainPoints       Param = C.VLCC_PARAM_PQ_TRAIN_POINTS
	ParamOPQIters            Param = C.VLCC_PARAM_OPQ_ITERS
	ParamInit                Param = C.VLCC_PARAM_INIT
	ParamOPQTrainPoints      Param = C.VLCC_PARAM_OPQ_TRAIN_POINTS
	ParamPrecision           Param = C.VLCC_PARAM_PRECISION
	ParamErrorCode           Param = C.VLCC_PARAM_ERROR_CODE
)

// NoID marks result slots that no vector fills.
const NoID = ^uint64(0)

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

// ABIVersion is the ABI version of the loaded library (VLCC_ABI_VERSION of its header).
func ABIVersion() uint32 { return uint32(C.vlcc_abi_version()) }

// Version is the loaded library's version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.vlcc_version()) }

// VersionNumber is the loaded library's version as MAJOR*10000 + MINOR*100 + PATCH.
func VersionNumber() uint32 { return uint32(C.vlcc_version_number()) }

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
			if s := C.search_params(sp, C.size_t(p.K), C.size_t(p.NProbe), C.size_t(p.Rerank)); s != C.VLCC_STATUS_OK {
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
