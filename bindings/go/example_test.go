package vlccompress_test

import (
	"fmt"

	"vlc-compress.dev/vlccompress"
)

// Train a codebook, index vectors and search them.
func Example() {
	ctx, err := vlccompress.NewContext(vlccompress.CPU, 0, 0)
	if err != nil {
		panic(err)
	}
	defer ctx.Close()

	const n, d = 2000, 8
	x := make([]float32, n*d)
	for i := range x {
		x[i] = float32((i*7919)%1000) / 100
	}
	c, _ := vlccompress.NewCompressor(ctx)
	defer c.Close()
	_ = c.SetParam(vlccompress.ParamAnchors, 16)
	_ = c.SetParam(vlccompress.ParamBytesPerVector, 4)
	if err := c.Train(x, d); err != nil {
		panic(err)
	}
	ix, _ := vlccompress.NewIndex(c)
	defer ix.Close()
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i)
	}
	_ = ix.Add(x, ids)
	hits, dist, _ := ix.Search(x[42*d:43*d], vlccompress.SearchParams{K: 3, NProbe: 4, Rerank: 10, Raw: x})
	fmt.Println("nearest to 42:", hits[0], "at distance", dist[0])
	// Output: nearest to 42: 42 at distance 0
}
