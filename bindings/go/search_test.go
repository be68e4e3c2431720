package vlccompress

import (
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
)

// SearchInto writes what Search returns into the caller's slices, and refuses slices of the
// wrong length.
func TestSearchInto(t *testing.T) {
	_, ix, x := indexed(t, 2000, 6)
	p := SearchParams{K: 7, NProbe: 8}
	wantIDs, wantDist, err := ix.Search(x[:30*dim], p)
	if err != nil {
		t.Fatal(err)
	}
	ids, dist := make([]uint64, 30*7), make([]float32, 30*7)
	if err := ix.SearchInto(x[:30*dim], p, ids, dist); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ids, wantIDs) || !reflect.DeepEqual(dist, wantDist) {
		t.Fatal("SearchInto differs from Search")
	}
	if err := ix.SearchInto(x[:30*dim], p, ids[:10], dist); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short ids: %v", err)
	}
	if err := ix.SearchInto(x[:30*dim], p, nil, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("nil slices: %v", err)
	}
}

func TestFilters(t *testing.T) {
	const n = 2000
	_, ix, x := indexed(t, n, 21)
	q := x[:20*dim]
	p := SearchParams{K: 10, NProbe: 64}
	want, _, err := ix.Search(q, p)
	if err != nil {
		t.Fatal(err)
	}
	every := func(ids []uint64, ok func(uint64) bool) bool {
		for _, id := range ids {
			if !ok(id) {
				return false
			}
		}
		return true
	}
	evens := make([]byte, n/8)
	for i := range evens {
		evens[i] = 0x55
	}
	odds := make([]uint64, 0, n/2)
	for i := uint64(1); i < n; i += 2 {
		odds = append(odds, i)
	}
	for name, c := range map[string]struct {
		f  *Filter
		ok func(uint64) bool
	}{
		"bitset": {FilterBitset(evens, n), func(id uint64) bool { return id%2 == 0 }},
		"ids":    {FilterIDs(odds), func(id uint64) bool { return id%2 == 1 }},
		"func":   {FilterFunc(func(id uint64) bool { return id%7 == 0 }), func(id uint64) bool { return id%7 == 0 }},
	} {
		p.Filter = c.f
		got, _, err := ix.Search(q, p)
		if err != nil || !every(got, c.ok) {
			t.Fatalf("%s: %v, ids %v", name, err, got[:10])
		}
	}
	// Fewer allowed than K: the rest are NoID with distance NaN.
	p.Filter = FilterIDs([]uint64{3, 4})
	got, dist, err := ix.Search(q[:dim], p)
	if err != nil || got[2] != NoID || !math.IsNaN(float64(dist[2])) || got[0] == NoID || got[1] == NoID {
		t.Fatalf("padding: %v %v %v", err, got, dist)
	}
	// A panicking func fails the search; an unsorted list and a short bitset are refused.
	p.Filter = FilterFunc(func(uint64) bool { panic("no") })
	if _, _, err := ix.Search(q, p); !errors.Is(err, ErrCallbackFailed) {
		t.Fatalf("panicking filter: %v", err)
	}
	p.Filter = FilterIDs([]uint64{5, 4})
	if _, _, err := ix.Search(q, p); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unsorted ids: %v", err)
	}
	p.Filter = FilterBitset(evens, n+100)
	if _, _, err := ix.Search(q, p); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short bitset: %v", err)
	}
	p.Filter = nil
	if got, _, _ := ix.Search(q, p); !reflect.DeepEqual(got, want) {
		t.Fatal("no filter: results changed")
	}
}

func TestByID(t *testing.T) {
	c, ix, x := indexed(t, 1000, 22)
	has, err := ix.Contains([]uint64{3, 5000})
	if err != nil || !has[0] || has[1] {
		t.Fatalf("contains: %v %v", has, err)
	}
	v, err := ix.ReconstructIDs([]uint64{3, 4})
	if err != nil || len(v) != 2*dim {
		t.Fatal(err)
	}
	var gap float64
	for i := range v {
		gap += math.Abs(float64(v[i] - x[3*dim+i]))
	}
	if gap > 2*dim {
		t.Fatalf("reconstructed far from the originals: %v", gap)
	}
	codes, err := ix.Codes([]uint64{3, 4})
	if err != nil {
		t.Fatal(err)
	}
	back, err := c.Decode(codes)
	if err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("codes decode to the reconstruction: %v", err)
	}
	if _, err := ix.ReconstructIDs([]uint64{5000}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("missing id: %v", err)
	}
	if _, err := ix.Codes([]uint64{5000}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("missing id: %v", err)
	}
	if n, err := ix.Remove([]uint64{3}); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if has, _ := ix.Contains([]uint64{3}); has[0] {
		t.Fatal("removed id still held")
	}
}

func TestRangeSearch(t *testing.T) {
	_, ix, x := indexed(t, 2000, 23)
	q := x[:3*dim]
	p := SearchParams{K: 5, NProbe: 64}
	top, dist, err := ix.Search(q, p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := ix.RangeSearch(q, dist[4], p)
	if err != nil || len(r.Offsets) != 4 || r.Offsets[1] < 5 || r.IDs[0] != top[0] {
		t.Fatalf("range: %v %v", err, r.Offsets)
	}
	for i := 0; i < r.Offsets[1]; i++ {
		if r.Distances[i] > dist[4] || (i > 0 && r.Distances[i] < r.Distances[i-1]) {
			t.Fatalf("hit %d: %v", i, r.Distances[:r.Offsets[1]])
		}
	}
	p.Filter = FilterFunc(func(id uint64) bool { return id%2 == 0 })
	f, err := ix.RangeSearch(q, dist[4], p)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range f.IDs {
		if id%2 != 0 {
			t.Fatal("filter ignored")
		}
	}
	if _, err := ix.RangeSearch(q, float32(math.NaN()), p); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NaN radius: %v", err)
	}
}

func TestFetchRerank(t *testing.T) {
	_, ix, x := indexed(t, 2000, 24)
	q := x[:10*dim]
	p := SearchParams{K: 5, NProbe: 16, Rerank: 30, Raw: x}
	want, wantD, err := ix.Search(q, p)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	var mu sync.Mutex
	p.Raw = nil
	p.Fetch = func(ids []uint64, out []float32) error {
		mu.Lock()
		calls++
		mu.Unlock()
		for i, id := range ids {
			copy(out[i*dim:(i+1)*dim], x[int(id)*dim:(int(id)+1)*dim])
		}
		return nil
	}
	got, gotD, err := ix.Search(q, p)
	if err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotD, wantD) || calls != 10 {
		t.Fatalf("fetch re-rank: %v, %d calls", err, calls)
	}
	p.Fetch = func([]uint64, []float32) error { return errors.New("store down") }
	if _, _, err := ix.Search(q, p); !errors.Is(err, ErrCallbackFailed) {
		t.Fatalf("failing fetch: %v", err)
	}
	p.Fetch, p.Raw = func([]uint64, []float32) error { return nil }, x
	if _, _, err := ix.Search(q, p); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("both Raw and Fetch: %v", err)
	}
}

func TestRefinedIndex(t *testing.T) {
	c, _, x := indexed(t, 2000, 25)
	ix, err := NewIndexWithRefine(c, RefineInt8)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Add(x, rowIDs(2000)); err != nil {
		t.Fatal(err)
	}
	q := x[:10*dim]
	exact, _, err := ix.Search(q, SearchParams{K: 5, NProbe: 16, Rerank: 30, Raw: x})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ix.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := NewContext(CPU, 0, 1)
	defer ctx.Close()
	back, err := Deserialize(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	got, _, err := back.Search(q, SearchParams{K: 5, NProbe: 16, Rerank: 30})
	if err != nil {
		t.Fatal(err)
	}
	same := 0
	for i := 0; i < 10; i++ {
		if got[i*5] == exact[i*5] {
			same++
		}
	}
	if r, _ := back.Refine(); r != RefineInt8 || same < 9 {
		t.Fatalf("refine %v, %d of 10 nearest agree", r, same)
	}
	if _, err := NewIndexWithRefine(c, Refine(7)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestSearchBounds(t *testing.T) {
	c, _, x := indexed(t, 2000, 26)
	ix, err := NewIndexWithRefine(c, RefineBound)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Add(x, rowIDs(2000)); err != nil {
		t.Fatal(err)
	}
	q := x[:10*dim]
	r, err := ix.SearchBounds(q, SearchParams{K: 5, NProbe: 16})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range r.IDs {
		var e float32
		for j := 0; j < dim; j++ {
			v := q[(i/5)*dim+j] - x[int(id)*dim+j]
			e += v * v
		}
		if e < r.Lower[i]*0.9999-1e-4 || e > r.Upper[i]*1.0001+1e-4 {
			t.Fatalf("hit %d: %v not in [%v, %v]", i, e, r.Lower[i], r.Upper[i])
		}
	}
	every, _, err := ix.Search(q, SearchParams{K: 5, NProbe: 16, Rerank: 2000, Raw: x})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ix.SearchBounds(q, SearchParams{K: 5, NProbe: 16, Rerank: 2000, Raw: x, RerankAuto: true})
	if err != nil || !reflect.DeepEqual(a.IDs, every) || !a.Certified[0] || a.Reranked[0] == 0 {
		t.Fatalf("auto: %v %v %v", err, a.Certified, a.Reranked)
	}
}
