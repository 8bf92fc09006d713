package memcached_test

import (
	"testing"

	"github.com/floodgate/floodgate/store/storetest"
)

// BenchmarkTake is the conformance suite's store benchmark: Take of one
// unit in parallel on 1 and 10 000 keys (a million keys would take minutes
// to populate one round trip at a time). Per-algorithm and hot-key figures,
// side by side with Redis, are in the bench module
// (BenchmarkMemcachedKeys10kParallel64, BenchmarkMemcachedKeys1Parallel64).
func BenchmarkTake(b *testing.B) {
	h := harness()
	h.BenchKeys = []int{1, 10_000}
	storetest.Bench(b, h)
}
