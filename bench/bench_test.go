package bench

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

// Shared parameters. "Never refuses" limits are token buckets of a burst
// no run can spend (1e9), refilled at 1 per second so that per-key state
// stays live (a bucket refilled faster would be back to full, and dropped
// by the memory store, within a microsecond).
const (
	neverBurst = 1_000_000_000
	neverRate  = 1 // per second
	// uberRate is uber-go/ratelimit's rate: 1e9 per second, one permit per
	// nanosecond, so that Take never sleeps (uber has no burst and no
	// refusal: it paces, so the only comparable work is a pass-through).
	uberRate = 1_000_000_000
)

// neverParams is Floodgate's never-refusing limit.
var neverParams = algo.Params{Algorithm: algo.TokenBucket, Limit: neverRate, Period: time.Second, Burst: neverBurst}

// deniedParams admits one unit per hour: after the first call, every call
// of a benchmark is refused.
var deniedParams = algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 1}

// benchKeys returns n distinct 16-byte keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%011d", i)
	}
	return keys
}

// liveHeap is the heap in use after full collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// perKey returns the heap that populate grew by, per key, for n keys: the
// B/key metric.
func perKey(n int, populate func()) float64 {
	before := liveHeap()
	populate()
	after := liveHeap()
	return float64(after-before) / float64(n)
}

// stride walks keys from a goroutine's own start by a step prime to every
// power of two, so goroutines rarely meet on a key and hardware prefetching
// does not hide the cost of a large key space.
type stride struct{ i, n int }

func (s *stride) next() int {
	i := s.i
	if s.i += 7919; s.i >= s.n {
		s.i -= s.n
	}
	return i
}

// cpuTime is the CPU time (user and system) the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCPU runs loop and reports the metric cpu-ns/op: the process's CPU
// time per operation. Unlike ns/op (wall time), it does not grow when other
// processes take the cores, so it is the figure to compare on a shared
// machine; in a parallel benchmark it sums every goroutine's time, so it is
// about GOMAXPROCS × ns/op when the cores are free.
func measureCPU(b *testing.B, loop func()) {
	start := cpuTime()
	loop()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
