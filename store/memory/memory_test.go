package memory_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

func harness() storetest.Harness {
	return storetest.Harness{
		New: func(tb testing.TB, clock func() time.Time) store.Store {
			// A nil clock (Bench) keeps the store's default.
			st, err := memory.New(memory.WithClock(clock), memory.WithSweepInterval(0))
			if err != nil {
				tb.Fatal(err)
			}
			return st
		},
		Parallel: true,
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}

func BenchmarkTake(b *testing.B) {
	h := harness()
	h.New = func(tb testing.TB, clock func() time.Time) store.Store {
		// No key cap: under DefaultMaxKeys the million-key store evicts
		// (its fullest shards fill first) and Bench fails its key check.
		st, err := memory.New(memory.WithClock(clock), memory.WithMaxKeys(0))
		if err != nil {
			tb.Fatal(err)
		}
		return st
	}
	storetest.Bench(b, h)
}

func FuzzConformance(f *testing.F) {
	storetest.Fuzz(f, harness())
}
