package vlccompress

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

// reports counts what a ProgressFunc hears and cancels at report number stopAt.
type reports struct {
	mu     sync.Mutex
	n      int
	stopAt int
	phases map[Phase]bool
}

func (r *reports) fn(p Phase, done, total uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phases == nil {
		r.phases = map[Phase]bool{}
	}
	r.phases[p] = true
	r.n++
	return r.n <= r.stopAt
}

func TestProgressAndCancel(t *testing.T) {
	c, ix, x := indexed(t, 4000, 21)
	// Another index on this codebook, before the retraining below.
	other, err := NewIndex(c)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Add(x[:1000*dim], rowIDs(1000)); err != nil {
		t.Fatal(err)
	}
	all := &reports{stopAt: 1 << 30}
	if err := c.SetProgress(all.fn); err != nil {
		t.Fatal(err)
	}
	if err := c.SetParam(ParamSeed, 5); err != nil {
		t.Fatal(err)
	}
	if err := c.Train(x, dim); err != nil {
		t.Fatal(err)
	}
	if !all.phases[PhaseAnchors] || !all.phases[PhaseCodebooks] || all.n < 10 {
		t.Fatalf("training reported %d times, phases %v", all.n, all.phases)
	}
	trainedFp, _ := c.Fingerprint()
	// Cancelled at the first report, the codebooks' first and the very last (training
	// re-reports on a clock, so points, not counts): the codebook stays.
	stops := []ProgressFunc{
		func(Phase, uint64, uint64) bool { return false },
		func(p Phase, _, _ uint64) bool { return p != PhaseCodebooks },
		func(p Phase, done, total uint64) bool { return p != PhaseCodebooks || done < total },
	}
	for i, stop := range stops {
		if err := c.SetProgress(stop); err != nil {
			t.Fatal(err)
		}
		if err := c.Train(x, dim); !errors.Is(err, ErrCancelled) {
			t.Fatalf("stop %d: %v", i, err)
		}
		if got, _ := c.Fingerprint(); got != trainedFp {
			t.Fatalf("stop %d: a cancelled Train changed the codebook", i)
		}
	}
	// A panicking ProgressFunc cancels too.
	if err := c.SetProgress(func(Phase, uint64, uint64) bool { panic("no") }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Encode(x); !errors.Is(err, ErrCancelled) {
		t.Fatalf("a panicking ProgressFunc: %v", err)
	}
	if err := c.SetProgress(nil); err != nil {
		t.Fatal(err)
	}

	// An index: cancelled adds and merges leave its bytes.
	before, err := ix.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.SetProgress((&reports{stopAt: 0}).fn); err != nil {
		t.Fatal(err)
	}
	if err := ix.Add(x[:1000*dim], rowIDs(1000)); !errors.Is(err, ErrCancelled) {
		t.Fatalf("add: %v", err)
	}
	if err := ix.Merge(other); !errors.Is(err, ErrCancelled) {
		t.Fatalf("merge: %v", err)
	}
	if after, _ := ix.Serialize(); !bytes.Equal(after, before) {
		t.Fatal("a cancelled add or merge changed the index")
	}
	merged := &reports{stopAt: 1 << 30}
	if err := ix.SetProgress(merged.fn); err != nil {
		t.Fatal(err)
	}
	if err := ix.Merge(other); err != nil || !merged.phases[PhaseMerge] {
		t.Fatalf("merge: %v, phases %v", err, merged.phases)
	}
}

// A Context's ProgressFunc hears the objects that have none of their own.
func TestContextProgress(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	heard := &reports{stopAt: 1 << 30}
	if err := ctx.SetProgress(heard.fn); err != nil {
		t.Fatal(err)
	}
	c := trained(t, ctx, clustered(3000, 4))
	defer c.Close()
	if !heard.phases[PhaseAnchors] {
		t.Fatalf("the context heard %v", heard.phases)
	}
	if err := ctx.SetProgress((&reports{stopAt: 0}).fn); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Encode(clustered(100, 5)); !errors.Is(err, ErrCancelled) {
		t.Fatalf("encode under a cancelling context: %v", err)
	}
	if err := ctx.SetProgress(nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Encode(clustered(100, 5)); err != nil {
		t.Fatal(err)
	}
}

// A deadline stops a long Train, which then matches both ErrCancelled and the context's
// error and leaves the compressor untrained.
func TestTrainContextDeadline(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	c, err := NewCompressor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for p, v := range map[Param]float64{ParamAnchors: 256, ParamBytesPerVector: 8, ParamMaxIters: 200, ParamTol: 0, ParamPQIters: 50} {
		if err := c.SetParam(p, v); err != nil {
			t.Fatal(err)
		}
	}
	x := clustered(60000, 6)
	deadline, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.TrainContext(deadline, x, dim)
	late := time.Since(start) - 50*time.Millisecond
	if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TrainContext past its deadline: %v", err)
	}
	var lib *Error
	if !errors.As(err, &lib) || lib.Status != StatusCancelled {
		t.Fatalf("errors.As: %v", err)
	}
	t.Logf("returned %v after the deadline", late)
	if _, err := c.Fingerprint(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("a cancelled first Train left a codebook: %v", err)
	}
	// A context done before the call: nothing runs.
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := c.TrainContext(done, x, dim); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrCancelled) {
		t.Fatalf("a done context: %v", err)
	}
}

func TestContextVariantsOnIndexAndEncode(t *testing.T) {
	c, ix, x := indexed(t, 4000, 22)
	before, _ := ix.Serialize()
	done, stop := context.WithCancel(context.Background())
	stop()
	if err := ix.AddContext(done, x[:10*dim], rowIDs(10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("AddContext: %v", err)
	}
	if err := ix.MergeContext(done, ix); err == nil {
		t.Fatal("merging an index into itself")
	}
	if _, err := c.EncodeContext(done, x); !errors.Is(err, ErrCancelled) {
		t.Fatalf("EncodeContext: %v", err)
	}
	if after, _ := ix.Serialize(); !bytes.Equal(after, before) {
		t.Fatal("a cancelled call changed the index")
	}
	// A live context: the calls run, and the objects' own ProgressFuncs still hear them.
	heard := &reports{stopAt: 1 << 30}
	if err := ix.SetProgress(heard.fn); err != nil {
		t.Fatal(err)
	}
	live := context.Background()
	if err := ix.AddContext(live, x[:10*dim], []uint64{9000, 9001, 9002, 9003, 9004, 9005, 9006, 9007, 9008, 9009}); err != nil {
		t.Fatal(err)
	}
	if !heard.phases[PhaseEncode] {
		t.Fatalf("the index's ProgressFunc heard %v", heard.phases)
	}
	want, _ := c.Encode(x)
	got, err := c.EncodeContext(live, x)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("EncodeContext: %v", err)
	}
	other, _ := NewIndex(c)
	defer other.Close()
	if err := other.Add(x[:100*dim], rowIDs(100)); err != nil {
		t.Fatal(err)
	}
	if err := ix.MergeContext(live, other); err != nil {
		t.Fatal(err)
	}
	if n, _ := ix.Len(); n != 4110 {
		t.Fatalf("%d vectors after add and merge", n)
	}
}

// Close on a compressor waits for the calls in flight; later calls answer ErrInvalidState.
func TestCompressorCloseWaitsForEncodes(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	x := clustered(4000, 8)
	c := trained(t, ctx, x)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := c.Encode(x[:500*dim]); err != nil && !errors.Is(err, ErrInvalidState) {
					t.Error(err)
					return
				}
			}
		}()
	}
	time.Sleep(5 * time.Millisecond)
	c.Close()
	wg.Wait()
	if _, err := c.Encode(x[:dim]); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("encode after Close: %v", err)
	}
	c.Close()
}

// A deferred load searches like a full one, verifies, and reports its memory by part.
func TestLoadDeferredVerifyAndMemory(t *testing.T) {
	_, ix, x := indexed(t, 3000, 23)
	mem, err := ix.MemoryUsage()
	if err != nil || mem.SearchTables != 0 || mem.IDs != 3000*8 || mem.Codes == 0 {
		t.Fatalf("before a search: %+v %v", mem, err)
	}
	path := filepath.Join(t.TempDir(), "ix.vlcc")
	if err := ix.Save(path); err != nil {
		t.Fatal(err)
	}
	ctx, err := NewContext(CPU, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	lazy, err := LoadDeferred(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if err := lazy.Verify(); err != nil {
		t.Fatal(err)
	}
	p, _ := DefaultSearchParams()
	a, _, err := ix.Search(x[:5*dim], p)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := lazy.Search(x[:5*dim], p)
	if err != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("deferred load searches differently: %v", err)
	}
	mem, err = lazy.MemoryUsage()
	if err != nil || !mem.MemoryMapped || mem.SearchTables == 0 {
		t.Fatalf("after a search: %+v %v", mem, err)
	}
	if _, err := LoadDeferred(ctx, filepath.Join(t.TempDir(), "missing.vlcc")); !errors.Is(err, ErrIO) {
		t.Fatalf("missing file: %v", err)
	}
}

// The estimate is what the context's cap is checked against: under it, training is refused
// and the codebook kept.
func TestEstimateMemoryAndCap(t *testing.T) {
	c, _, x := indexed(t, 4000, 24)
	host, device, err := c.EstimateMemory(4000, dim)
	if err != nil || host < 4000*dim || device != 0 {
		t.Fatalf("estimate %d %d %v", host, device, err)
	}
	before, _ := c.Fingerprint()
	ctx, _ := NewContext(CPU, 0, 2)
	defer ctx.Close()
	capped, err := DeserializeCodebook(ctx, mustSerialize(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close()
	for p, v := range map[Param]float64{ParamAnchors: 32, ParamBytesPerVector: 8} {
		capped.SetParam(p, v)
	}
	// Far under even a tiled training's needs.
	if err := ctx.SetMemoryCap(int(host / 50)); err != nil {
		t.Fatal(err)
	}
	// Nothing to cap on the CPU backend; a negative cap is refused.
	if err := ctx.SetDeviceMemoryCap(1); err != nil {
		t.Fatal(err)
	}
	if err := ctx.SetDeviceMemoryCap(-1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a negative device cap: %v", err)
	}
	if err := capped.Train(x, dim); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("training under a 50th of its estimate: %v", err)
	}
	if fp, _ := capped.Fingerprint(); fp != before {
		t.Fatal("a refused Train changed the codebook")
	}
}

// Adds and searches answer to the cap too: an add past it is refused and leaves the index;
// a search without room for its tables goes without them, with the same results.
func TestEstimatesAndCapOnTheIndex(t *testing.T) {
	const n = 4000
	c, ix, x := indexed(t, n, 25)
	host, device, err := c.EstimateMemoryFor(WorkBuild, n, dim)
	if err != nil || host < n*8 || device != 0 {
		t.Fatalf("build estimate %d %d %v", host, device, err)
	}
	if h, _, err := c.EstimateMemoryFor(WorkSearch, n, dim); err != nil || h == 0 {
		t.Fatalf("search estimate %d %v", h, err)
	}
	if _, _, err := c.EstimateMemoryFor(Work(9), 1, dim); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("unknown work: %v", err)
	}
	b, err := ix.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := NewContext(CPU, 0, 2)
	defer ctx.Close()
	capped, err := Deserialize(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer capped.Close()
	p, _ := DefaultSearchParams()
	add, _, err1 := capped.EstimateMemory(WorkBuild, n, SearchParams{})
	search, _, err2 := capped.EstimateMemory(WorkSearch, 10, p)
	if err1 != nil || err2 != nil || add < n*8 || search == 0 {
		t.Fatalf("index estimates %d %d: %v %v", add, search, err1, err2)
	}
	if _, _, err := capped.EstimateMemory(WorkTrain, 1, p); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("an index does not train: %v", err)
	}
	ctx.SetMemoryCap(int(add / 2))
	if err := capped.Add(x, rowIDs(n)); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("an add past the cap: %v", err)
	}
	if got, _ := capped.Len(); got != n {
		t.Fatalf("a refused add changed the index: %d vectors", got)
	}
	ctx.SetMemoryCap(int(search - 1))
	q := x[:10*dim]
	gotIDs, gotD, err := capped.Search(q, p)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := capped.MemoryUsage(); m.SearchTables != 0 {
		t.Fatalf("tables built past the cap: %+v", m)
	}
	ctx.SetMemoryCap(0)
	wantIDs, wantD, err := ix.Search(q, p)
	if err != nil || !reflect.DeepEqual(gotIDs, wantIDs) || !reflect.DeepEqual(gotD, wantD) {
		t.Fatalf("a search without its tables differs: %v", err)
	}
}

func mustSerialize(t *testing.T, c *Compressor) []byte {
	t.Helper()
	b, err := c.SerializeCodebook()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Errors from the Context variants carry the library's message, as the plain calls' do (the
// progress callback put back after the call once cleared it).
func TestContextVariantsKeepTheirMessages(t *testing.T) {
	c, ix, x := indexed(t, 4000, 23)
	bg := context.Background()
	nan := append([]float32(nil), x[:dim]...)
	nan[3] = float32(math.NaN())
	other, err := NewCompressor(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, foreign, _ := indexed(t, 4000, 24)
	done, stop := context.WithCancel(bg)
	stop()
	for name, err := range map[string]error{
		"TrainContext":    other.TrainContext(bg, nan, dim),
		"EncodeContext":   func() error { _, err := other.EncodeContext(bg, x[:dim]); return err }(),
		"AddContext":      ix.AddContext(bg, nan, []uint64{1}),
		"MergeContext":    ix.MergeContext(bg, foreign),
		"AddContext done": ix.AddContext(done, x[:dim], []uint64{1}),
	} {
		var lib *Error
		if !errors.As(err, &lib) || lib.Message == "" {
			t.Errorf("%s: %v has no message", name, err)
		}
	}
}

// Searches stop when their context is done or their timeout passes, return nothing, and
// match ErrCancelled and the context's error (or ErrTimedOut); loads and verifies too.
func TestSearchesLoadsAndVerifiesStop(t *testing.T) {
	_, ix, x := indexed(t, 4000, 25)
	q := append([]float32(nil), x...)
	bg := context.Background()
	p := SearchParams{K: 10, NProbe: 32}
	for name, run := range map[string]func(context.Context, SearchParams) error{
		"search": func(c context.Context, p SearchParams) error { _, _, err := ix.SearchContext(c, q, p); return err },
		"range":  func(c context.Context, p SearchParams) error { _, err := ix.RangeSearchContext(c, q, 1e30, p); return err },
	} {
		// Done during the search: its own callback cancels the context at the first report.
		ctx, cancel := context.WithCancel(bg)
		reports := 0
		p.Progress = func(ph Phase, done, total uint64) bool {
			if ph != PhaseSearch || done > total {
				t.Errorf("%s: report %v %d of %d", name, ph, done, total)
			}
			reports++
			cancel()
			return true
		}
		err := run(ctx, p)
		if !errors.Is(err, ErrCancelled) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: a done context gave %v", name, err)
		}
		// A millisecond's timeout passes while the callback sleeps.
		p.Progress = func(Phase, uint64, uint64) bool { time.Sleep(5 * time.Millisecond); return true }
		p.Timeout = time.Millisecond
		if err := run(bg, p); !errors.Is(err, ErrTimedOut) {
			t.Fatalf("%s: past its timeout: %v", name, err)
		}
		p.Progress, p.Timeout = nil, 0
		if err := run(bg, p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The context's timeout, for the calls that set none.
	if err := ix.ctx.SetTimeout(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d, err := ix.ctx.Timeout(); err != nil || d != time.Millisecond {
		t.Fatalf("Timeout: %v %v", d, err)
	}
	slow := SearchParams{K: 10, NProbe: 32, Progress: func(Phase, uint64, uint64) bool { time.Sleep(5 * time.Millisecond); return true }}
	if _, _, err := ix.Search(q, slow); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("the context's timeout: %v", err)
	}
	if err := ix.ctx.SetTimeout(0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ix.vlcc")
	if err := ix.Save(path); err != nil {
		t.Fatal(err)
	}
	done, stop := context.WithCancel(bg)
	stop()
	if _, err := LoadContext(done, ix.ctx, path, true); !errors.Is(err, context.Canceled) {
		t.Fatalf("LoadContext: %v", err)
	}
	loaded, err := LoadContext(bg, ix.ctx, path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	lazy, err := LoadDeferredContext(bg, ix.ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer lazy.Close()
	if err := lazy.VerifyContext(done); !errors.Is(err, ErrCancelled) {
		t.Fatalf("VerifyContext: %v", err)
	}
	if err := lazy.VerifyContext(bg); err != nil {
		t.Fatal(err)
	}
}
