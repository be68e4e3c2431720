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
*/
import "C"

import (
	"fmt"
	"runtime"
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

// ABIVersion is the ABI version of the loaded library (VLCC_ABI_VERSION of its header).
func ABIVersion() uint32 { return uint32(C.vlcc_abi_version()) }

// Version is the loaded library's version, "MAJOR.MINOR.PATCH".
func Version() string { return C.GoString(C.vlcc_version()) }

// VersionNumber is the loaded library's version as MAJOR*10000 + MINOR*100 + PATCH.
func VersionNumber() uint32 { return uint32(C.vlcc_version_number()) }
