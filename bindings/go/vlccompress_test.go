package vlccompress

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"
)

const dim = 16

// clustered makes n seeded points around 8 centres.
func clustered(n int, seed uint32) []float32 {
	s := seed
	next := func() float32 {
		s = s*1664525 + 1013904223
		return float32((s>>8)%2000)/1000 - 1
	}
	centres := make([]float32, 8*dim)
	for i := range centres {
		centres[i] = next() * 10
	}
	x := make([]float32, n*dim)
	for i := 0; i < n; i++ {
		for t := 0; t < dim; t++ {
			x[i*dim+t] = centres[(i%8)*dim+t] + next()
		}
	}
	return x
}

// rowIDs returns 0..n-1: ids equal to row numbers.
func rowIDs(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i)
	}
	return ids
}

// indexed returns a compressor trained on n clustered vectors (on a 2-thread CPU context) and
// an index holding them under their row numbers; the test's cleanup closes them.
func indexed(t *testing.T, n int, seed uint32) (*Compressor, *Index, []float32) {
	t.Helper()
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	x := clustered(n, seed)
	c := trained(t, ctx, x)
	ix, err := NewIndex(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Add(x, rowIDs(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close(); c.Close(); ctx.Close() })
	return c, ix, x
}

func trained(t testing.TB, ctx *Context, x []float32) *Compressor {
	t.Helper()
	c, err := NewCompressor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for p, v := range map[Param]float64{ParamAnchors: 32, ParamBytesPerVector: 8, ParamMaxIters: 8, ParamPQIters: 8} {
		if err := c.SetParam(p, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Train(x, dim); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	x := clustered(3000, 1)
	c := trained(t, ctx, x)
	defer c.Close()

	codes, err := c.Encode(x)
	if err != nil {
		t.Fatal(err)
	}
	cs, _ := c.CodecSize()
	if len(codes) != 3000*cs {
		t.Fatalf("%d code bytes", len(codes))
	}
	// Device input needs a CUDA context; this one runs on the CPU.
	var ve *Error
	if _, err := c.EncodeDevice(uintptr(unsafe.Pointer(&x[0])), 10); !errors.As(err, &ve) || ve.Status != StatusBackendUnavailable {
		t.Fatalf("device input on the CPU: %v", err)
	}
	y, err := c.Decode(codes)
	if err != nil {
		t.Fatal(err)
	}
	var e, v float64
	for i := range x {
		e += float64((x[i] - y[i]) * (x[i] - y[i]))
		v += float64(x[i] * x[i])
	}
	if e > 0.05*v {
		t.Fatalf("reconstruction error %g of %g", e, v)
	}

	ix, err := NewIndex(c)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ids := rowIDs(3000)
	if err := ix.AddDevice(uintptr(unsafe.Pointer(&x[0])), ids); !errors.As(err, &ve) || ve.Status != StatusBackendUnavailable {
		t.Fatalf("device input on the CPU: %v", err)
	}
	if err := ix.Add(x, ids); err != nil {
		t.Fatal(err)
	}
	q := x[:50*dim]
	if _, _, err := ix.SearchDeviceRaw(q, SearchParams{K: 5, NProbe: 8, Rerank: 20}, uintptr(unsafe.Pointer(&x[0])), 3000); !errors.As(err, &ve) || ve.Status != StatusBackendUnavailable {
		t.Fatalf("device raw vectors on the CPU: %v", err)
	}
	got, dist, err := ix.Search(q, SearchParams{K: 5, NProbe: 8, Rerank: 20, Raw: x})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if got[i*5] != uint64(i) || dist[i*5] != 0 {
			t.Fatalf("query %d: first hit %d at %g", i, got[i*5], dist[i*5])
		}
	}

	path := filepath.Join(t.TempDir(), "ix.vlcc")
	if err := ix.Save(path); err != nil {
		t.Fatal(err)
	}
	want, _, _ := ix.Search(q, SearchParams{K: 5, NProbe: 8})
	for _, mmap := range []bool{true, false} {
		back, err := Load(ctx, path, mmap)
		if err != nil {
			t.Fatal(err)
		}
		again, _, err := back.Search(q, SearchParams{K: 5, NProbe: 8})
		if err != nil || !reflect.DeepEqual(again, want) {
			t.Fatalf("loaded index (mmap=%v) differs: %v", mmap, err)
		}
		back.Close()
	}
	if n, err := ix.Remove(ids[:10]); err != nil || n != 10 {
		t.Fatalf("removed %d, %v", n, err)
	}
	if n, _ := ix.Len(); n != 2990 {
		t.Fatalf("len %d", n)
	}
}

func TestErrorsCarryStatusAndMessage(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if _, err := NewContext(Backend(42), 0, 1); err == nil {
		t.Fatal("unknown backend accepted")
	}
	c, _ := NewCompressor(ctx)
	defer c.Close()
	var ve *Error
	if err := c.SetParam(ParamBits, 5); !errors.As(err, &ve) || ve.Status != StatusInvalidArgument || ve.Message == "" {
		t.Fatalf("bits=5: %v", err)
	}
	// Bounds name the range, and a new compressor reads back each default.
	b, err := ParamBytesPerVector.Bounds()
	if err != nil || b.Min != 1 || b.Max != 4096 || !b.Whole || b.Default != 16 {
		t.Fatalf("bytes per vector bounds: %+v %v", b, err)
	}
	if err := c.SetParam(ParamBytesPerVector, b.Max+1); !errors.As(err, &ve) || ve.Status != StatusInvalidArgument {
		t.Fatalf("bytes above the bound: %v", err)
	}
	for _, p := range []Param{ParamAnchors, ParamTrim, ParamPQIters, ParamSeed} {
		b, err := p.Bounds()
		v, _ := c.Param(p)
		if err != nil || v != b.Default || b.Min > v || v > b.Max {
			t.Fatalf("param %d: %+v, value %v, %v", p, b, v, err)
		}
	}
	if _, err := Param(999).Bounds(); !errors.As(err, &ve) || ve.Status != StatusInvalidArgument {
		t.Fatalf("unknown param: %v", err)
	}
	if _, err := c.Encode(make([]float32, dim)); !errors.As(err, &ve) || ve.Status != StatusInvalidState {
		t.Fatalf("encode before train: %v", err)
	}
	x := clustered(20, 2)
	if err := c.Train(x, dim); !errors.As(err, &ve) || ve.Status != StatusNotEnoughData {
		t.Fatalf("20 points for 1024 anchors: %v", err)
	}
	x[3] = float32(math.NaN())
	_ = c.SetParam(ParamAnchors, 4)
	if err := c.Train(x, dim); !errors.As(err, &ve) || ve.Status != StatusNonFinite {
		t.Fatalf("NaN: %v", err)
	}
	if _, err := Load(ctx, filepath.Join(t.TempDir(), "missing.vlcc"), true); !errors.As(err, &ve) || ve.Status != StatusIO {
		t.Fatalf("missing file: %v", err)
	}
	// Each status's sentinel matches with errors.Is, through wrapping too; others do not.
	err = fmt.Errorf("training: %w", c.SetParam(ParamBits, 5))
	if !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrCorrupt) || errors.Is(ErrIO, ErrInvalidArgument) {
		t.Fatalf("sentinels: %v", err)
	}
	if _, err := Load(ctx, filepath.Join(t.TempDir(), "missing.vlcc"), true); !errors.Is(err, ErrIO) || !errors.As(err, &ve) || ve.Message == "" {
		t.Fatalf("missing file, sentinel: %v", err)
	}
}

func TestConcurrentSearches(t *testing.T) {
	ctx, _ := NewContext(CPU, 0, 2)
	defer ctx.Close()
	x := clustered(3000, 3)
	c := trained(t, ctx, x)
	ix, err := NewIndex(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // the index keeps what it needs
	defer ix.Close()
	ids := rowIDs(3000)
	if err := ix.Add(x, ids); err != nil {
		t.Fatal(err)
	}
	q := x[:64*dim]
	want, wd, err := ix.Search(q, SearchParams{K: 10, NProbe: 8})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, gd, err := ix.Search(q, SearchParams{K: 10, NProbe: 8})
			if err != nil {
				errs <- err
				return
			}
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gd, wd) {
				errs <- errors.New("concurrent search differs from sequential")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// The codebook's bytes, fingerprint, anchors, report, f16 input and the ABI version: what a
// service that ships codebooks between processes reads of a compressor.
func TestCodebookAccess(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	x := clustered(2000, 5)
	c := trained(t, ctx, x)
	defer c.Close()
	// The version as a string and as a number agree: MAJOR.MINOR.PATCH vs M*10000+m*100+p.
	var major, minor, patch uint32
	if n, err := fmt.Sscanf(Version(), "%d.%d.%d", &major, &minor, &patch); n != 3 || err != nil ||
		VersionNumber() != major*10000+minor*100+patch {
		t.Fatalf("version %q, number %d", Version(), VersionNumber())
	}
	if d, err := DefaultSearchParams(); err != nil || d.K != 10 || d.NProbe != 16 || d.Rerank != 0 || d.Raw != nil {
		t.Fatalf("default search params: %+v %v", d, err)
	}
	if ABIVersion() == 0 {
		t.Fatal("ABI version 0")
	}
	rep, err := c.TrainReport()
	if err != nil || rep.Iterations == 0 || !(rep.Energy > 0) || rep.MaxListOverMean < 1 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	anchors, err := c.Anchors()
	if err != nil || len(anchors) != 32*dim {
		t.Fatalf("%d anchor values, %v", len(anchors), err)
	}
	b, err := c.SerializeCodebook()
	if err != nil || len(b) == 0 {
		t.Fatalf("serialize: %d bytes, %v", len(b), err)
	}
	c2, err := DeserializeCodebook(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	f1, _ := c.Fingerprint()
	f2, err := c2.Fingerprint()
	if err != nil || f1 != f2 || f1 == 0 {
		t.Fatalf("fingerprints %x %x, %v", f1, f2, err)
	}
	var e *Error
	if _, err := DeserializeCodebook(ctx, b[:len(b)-1]); !errors.As(err, &e) || e.Status != StatusCorrupt {
		t.Fatalf("truncated bytes: %v", err)
	}
	// Small whole numbers are exact in f16, so both inputs give the same codes.
	small := make([]float32, 4*dim)
	half := make([]uint16, 4*dim)
	for i := range small {
		v := float32(i%7) - 3
		small[i] = v
		half[i] = f16(v)
	}
	want, err := c.Encode(small)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.EncodeF16(half)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("f16 codes differ: %v", err)
	}
}

// f16 is the binary16 bit pattern of a small whole number.
func f16(v float32) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	e := 0
	for v >= 2 {
		v /= 2
		e++
	}
	return sign | uint16(e+15)<<10 | uint16((v-1)*1024)
}

func TestIndexLifecycle(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if n, err := ctx.Threads(); err != nil || n != 2 {
		t.Fatalf("threads: %d %v", n, err)
	}
	var ve *Error
	if err := ctx.SetMemoryCap(-1); !errors.As(err, &ve) || ve.Status != StatusInvalidArgument {
		t.Fatalf("negative cap: %v", err)
	}
	if err := ctx.SetMemoryCap(0); err != nil {
		t.Fatal(err)
	}
	// Every search below rotates its queries in f32, as on any CPU.
	if err := ctx.SetExactRotation(true); err != nil {
		t.Fatal(err)
	}
	x := clustered(3000, 5)
	c := trained(t, ctx, x)
	defer c.Close()
	a, _ := NewIndex(c)
	defer a.Close()
	if err := a.Add(x[:2000*dim], rowIDs(2000)); err != nil {
		t.Fatal(err)
	}
	// The second index takes f16 input: small whole numbers, exact in f16.
	b, _ := NewIndex(c)
	defer b.Close()
	half := make([]uint16, 10*dim)
	for i := range half {
		half[i] = f16(float32(i % 7))
	}
	ids := rowIDs(10)
	for i := range ids {
		ids[i] += 5000
	}
	if err := b.AddF16(half, ids); err != nil {
		t.Fatal(err)
	}
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	st, err := a.Stats()
	if err != nil || st.Vectors != 2010 || st.Dim != dim || st.ResidualCodeSize == 0 || st.MaxListOverMean < 1 {
		t.Fatalf("stats %+v %v", st, err)
	}
	gotIDs, vecs, err := a.Reconstruct()
	if err != nil || len(gotIDs) != 2010 || len(vecs) != 2010*dim {
		t.Fatalf("reconstruct: %d ids, %d values, %v", len(gotIDs), len(vecs), err)
	}
	// Serialized and back: the same searches.
	bytes, err := a.Serialize()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Deserialize(ctx, bytes)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	p := SearchParams{K: 5, NProbe: 8}
	want, _, _ := a.Search(x[:20*dim], p)
	got, _, err := back.Search(x[:20*dim], p)
	if err != nil || len(got) != len(want) {
		t.Fatalf("search after deserialize: %v", err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("result %d: %d vs %d", i, got[i], want[i])
		}
	}
	if _, err := Deserialize(ctx, bytes[:100]); !errors.As(err, &ve) || ve.Status != StatusCorrupt {
		t.Fatalf("truncated bytes: %v", err)
	}
}

// A buffer that is not a whole number of rows is refused with InvalidArgument, never cut short.
func TestPartialRowsAreRefused(t *testing.T) {
	c, ix, x := indexed(t, 3000, 9)
	codes, err := c.Encode(x[:2*dim])
	if err != nil {
		t.Fatal(err)
	}
	p := SearchParams{K: 5, NProbe: 4, Rerank: 10, Raw: x}
	partial := map[string]func() error{
		"encode":     func() error { _, err := c.Encode(x[:dim+1]); return err },
		"encode f16": func() error { _, err := c.EncodeF16(make([]uint16, dim+1)); return err },
		"decode":     func() error { _, err := c.Decode(codes[:len(codes)-1]); return err },
		"add":        func() error { return ix.Add(x[:dim+1], rowIDs(1)) },
		"queries":    func() error { _, _, err := ix.Search(x[:2*dim-1], p); return err },
		"raw": func() error {
			q := p
			q.Raw = x[:len(x)-1]
			_, _, err := ix.Search(x[:dim], q)
			return err
		},
	}
	for what, f := range partial {
		if err := f(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", what, err)
		}
	}
}

// Benchmarks (go test -run '^$' -bench .): encoding and search on 20,000 clustered vectors,
// all threads of the machine.
func benchSetup(b *testing.B) (*Context, *Compressor, []float32) {
	ctx, err := NewContext(CPU, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	x := clustered(20000, 3)
	return ctx, trained(b, ctx, x), x
}

func BenchmarkEncode(b *testing.B) {
	ctx, c, x := benchSetup(b)
	defer ctx.Close()
	defer c.Close()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := c.Encode(x); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(x)/dim*b.N)/time.Since(start).Seconds(), "vectors/s")
}

func BenchmarkSearch(b *testing.B) {
	ctx, c, x := benchSetup(b)
	defer ctx.Close()
	defer c.Close()
	ix, err := NewIndex(c)
	if err != nil {
		b.Fatal(err)
	}
	defer ix.Close()
	n := len(x) / dim
	if err := ix.Add(x, rowIDs(n)); err != nil {
		b.Fatal(err)
	}
	q := x[:1000*dim]
	p := SearchParams{K: 10, NProbe: 8}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, _, err := ix.Search(q, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(1000*b.N)/time.Since(start).Seconds(), "queries/s")
}

// Close while searches run: each search returns results or ErrInvalidState, never reads a
// freed handle (run under -race by scripts/test.sh).
func TestCloseWaitsForSearches(t *testing.T) {
	_, ix, x := indexed(t, 3000, 4)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if _, _, err := ix.Search(x[:50*dim], SearchParams{K: 5, NProbe: 8}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrInvalidState) {
			t.Fatalf("search after close: %v", err)
		}
	}
	if _, err := ix.Len(); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("len after close: %v", err)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
}

// DecodeInto writes what Decode returns into the caller's slice, and refuses one of the
// wrong length.
func TestDecodeInto(t *testing.T) {
	c, _, x := indexed(t, 2000, 8)
	codes, err := c.Encode(x[:40*dim])
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.Decode(codes)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(want))
	if err := c.DecodeInto(codes, got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("DecodeInto differs from Decode")
	}
	if err := c.DecodeInto(codes, got[1:]); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("short out: %v", err)
	}
}

// An error level in each code's last byte: the same code size, another codebook, a search
// that runs; asked for where it cannot be, it is refused.
func TestErrorCode(t *testing.T) {
	ctx, err := NewContext(CPU, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	x := clustered(3000, 1)
	train := func(code float64) (*Compressor, error) {
		c, err := NewCompressor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for p, v := range map[Param]float64{ParamAnchors: 32, ParamBytesPerVector: 8, ParamMaxIters: 8, ParamPQIters: 8, ParamErrorCode: code} {
			if err := c.SetParam(p, v); err != nil {
				t.Fatal(err)
			}
		}
		return c, c.Train(x, dim)
	}
	on, err := train(2)
	if err != nil {
		t.Fatal(err)
	}
	defer on.Close()
	off, err := train(1)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	son, _ := on.CodecSize()
	soff, _ := off.CodecSize()
	fon, _ := on.Fingerprint()
	foff, _ := off.Fingerprint()
	if son != soff || fon == foff {
		t.Fatalf("code sizes %d %d, fingerprints %x %x", son, soff, fon, foff)
	}
	ix, err := NewIndex(on)
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.Add(x, rowIDs(3000)); err != nil {
		t.Fatal(err)
	}
	ids, _, err := ix.Search(x[:dim*10], SearchParams{K: 5, NProbe: 32})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for q := 0; q < 10; q++ {
		for _, id := range ids[q*5 : q*5+5] {
			if id == uint64(q) {
				found++
			}
		}
	}
	if found < 8 {
		t.Fatalf("a vector finds itself in %d of 10 searches", found)
	}
	// Inner product has no level: setting both is refused (whichever comes second).
	var ve *Error
	bad, err := NewCompressor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.SetParam(ParamMetric, 1); err != nil {
		t.Fatal(err)
	}
	if err := bad.SetParam(ParamErrorCode, 2); !errors.As(err, &ve) || ve.Status != StatusInvalidArgument {
		t.Fatalf("error code on with inner product: %v", err)
	}
	if err := bad.SetParam(ParamErrorCode, 3); !errors.As(err, &ve) || ve.Status != StatusInvalidArgument {
		t.Fatalf("error code 3: %v", err)
	}
}
