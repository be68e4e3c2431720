package vlccompress

import "testing"

// A search's Report says where it ran: the CPU, nothing fallen back; a refused search
// clears it. Fallback names come from the library.
func TestSearchReportsWhereItRan(t *testing.T) {
	_, ix, x := indexed(t, 4000, 26)
	rep := RunReport{Backend: CUDA, Fallbacks: FallbackDeviceDeclined}
	p := SearchParams{K: 5, NProbe: 8, Report: &rep}
	if _, _, err := ix.Search(x[:10*dim], p); err != nil {
		t.Fatal(err)
	}
	if rep.Backend != CPU || rep.Fallbacks != 0 {
		t.Fatalf("a CPU search reported %+v", rep)
	}
	rep = RunReport{Backend: CUDA, Fallbacks: FallbackDeviceDeclined}
	if _, err := ix.RangeSearch(x[:10*dim], 1e30, p); err != nil {
		t.Fatal(err)
	}
	if rep.Backend != CPU || rep.Fallbacks != 0 {
		t.Fatalf("a CPU range search reported %+v", rep)
	}
	if got := (FallbackPredicateFilter | FallbackNoRangeScan).String(); got != "predicate_filter|no_range_scan" {
		t.Fatalf("names: %q", got)
	}
}
