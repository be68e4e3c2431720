// A Go program that takes the binding as the README tells users to today (a `replace` naming
// the binding's sources), built against an installed library found with pkg-config (CI:
// scripts/test.sh, install step).
package main

import (
	"errors"
	"fmt"
	"math/rand"
	"os"

	"vlc-compress.dev/vlccompress"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	ctx, err := vlccompress.NewContext(vlccompress.CPU, 0, 0)
	if err != nil {
		return err
	}
	defer ctx.Close()
	const n, d = 4000, 16
	rng := rand.New(rand.NewSource(1))
	x := make([]float32, n*d)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	c, err := vlccompress.NewCompressor(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetParam(vlccompress.ParamAnchors, 32); err != nil {
		return err
	}
	if err := c.SetParam(vlccompress.ParamBytesPerVector, 8); err != nil {
		return err
	}
	if err := c.Train(x, d); err != nil {
		return err
	}
	ix, err := vlccompress.NewIndex(c)
	if err != nil {
		return err
	}
	defer ix.Close()
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = uint64(i)
	}
	if err := ix.Add(x, ids); err != nil {
		return err
	}
	got, _, err := ix.Search(x[:d], vlccompress.SearchParams{K: 5, NProbe: 32})
	if err != nil {
		return err
	}
	if got[0] != 0 {
		return fmt.Errorf("the nearest of vector 0 is %d", got[0])
	}
	if _, _, err := ix.Search(x[:d-1], vlccompress.SearchParams{K: 5, NProbe: 32}); !errors.Is(err, vlccompress.ErrInvalidArgument) {
		return fmt.Errorf("a partial row gave %v", err)
	}
	fmt.Println("go consumer: ok, library", vlccompress.Version())
	return nil
}
