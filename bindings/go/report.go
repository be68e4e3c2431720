package vlccompress

/*
#include "vlc_compress.h"
*/
import "C"

import "strings"

// Fallback is a reason a GPU context answered part of a call on the host (vlcc_fallback).
type Fallback uint32

// The reasons, as bits of RunReport.Fallbacks.
const (
	FallbackPredicateFilter   Fallback = C.VLCC_FALLBACK_PREDICATE_FILTER
	FallbackTooManyCandidates Fallback = C.VLCC_FALLBACK_TOO_MANY_CANDIDATES
	FallbackScanTableTooLarge Fallback = C.VLCC_FALLBACK_SCAN_TABLE_TOO_LARGE
	FallbackListTermsTooLarge Fallback = C.VLCC_FALLBACK_LIST_TERMS_TOO_LARGE
	FallbackCodeWidth         Fallback = C.VLCC_FALLBACK_CODE_WIDTH
	FallbackTooManyVectors    Fallback = C.VLCC_FALLBACK_TOO_MANY_VECTORS
	FallbackDeviceDeclined    Fallback = C.VLCC_FALLBACK_DEVICE_DECLINED
	FallbackCertifiedRerank   Fallback = C.VLCC_FALLBACK_CERTIFIED_RERANK
	FallbackNoRangeScan       Fallback = C.VLCC_FALLBACK_NO_RANGE_SCAN
)

// String names the reasons set ("predicate_filter|device_declined"; "" for none).
func (f Fallback) String() string {
	var names []string
	for bit := Fallback(1); bit != 0 && bit <= f; bit <<= 1 {
		if f&bit != 0 {
			names = append(names, C.GoString(C.vlcc_fallback_str(C.uint32_t(bit))))
		}
	}
	return strings.Join(names, "|")
}

// RunReport says where a search ran: the context's backend, and the parts a GPU context
// answered on the host instead, by reason (none on the CPU).
type RunReport struct {
	Backend   Backend
	Fallbacks Fallback
}

// read fills r (if not nil) from the report of the call just made on this OS thread: call it
// inside the same locked call (see call).
func (r *RunReport) read() {
	if r == nil {
		return
	}
	var c C.vlcc_run_report
	if C.vlcc_last_run_report(&c) != C.VLCC_STATUS_OK {
		*r = RunReport{}
		return
	}
	*r = RunReport{Backend: Backend(c.backend), Fallbacks: Fallback(c.fallbacks)}
}
