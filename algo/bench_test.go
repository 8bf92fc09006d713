package algo

import (
	"testing"
	"time"
)

// benchLimits is one typical limit per algorithm.
func benchLimits(b *testing.B) []*Limit {
	ps := []Params{
		{Algorithm: FixedWindow, Limit: 1000, Period: time.Minute},
		{Algorithm: FixedWindow, Limit: 1000, Calendar: CalendarMonth},
		{Algorithm: SlidingLog, Limit: 100, Period: time.Second},
		{Algorithm: SlidingWindow, Limit: 1000, Period: time.Minute},
		{Algorithm: SlidingWindow, Limit: 1000, Period: time.Minute, SubWindows: 60},
		{Algorithm: TokenBucket, Limit: 1000, Period: time.Second, Burst: 100},
		{Algorithm: GCRA, Limit: 1000, Period: time.Second, Burst: 100},
		{Algorithm: Shaper, Limit: 1000, Period: time.Second, Burst: 100},
		{Algorithm: SmoothBursty, Limit: 1000, Period: time.Second},
		{Algorithm: SmoothWarmup, Limit: 1000, Period: time.Second, WarmupPeriod: time.Second},
		{Algorithm: Concurrency, Limit: 100, LeaseTTL: 10 * time.Millisecond},
	}
	ls := make([]*Limit, len(ps))
	for i, p := range ps {
		ls[i] = mustCompile(b, p)
	}
	return ls
}

func benchName(l *Limit) string {
	name := l.Algorithm().String()
	switch {
	case l.p.Calendar != CalendarNone:
		name += "_month"
	case l.p.Algorithm == SlidingWindow:
		name += map[bool]string{true: "_N1", false: "_N60"}[l.p.SubWindows == 1]
	}
	return name
}

// BenchmarkTake is one key under a steady mix of admitted and refused
// requests: the cost of the pure decision, with no store around it.
func BenchmarkTake(b *testing.B) {
	for _, l := range benchLimits(b) {
		b.Run(benchName(l), func(b *testing.B) {
			b.ReportAllocs()
			var s State
			now := base
			admitted := 0
			for b.Loop() {
				now += 700 // ≈1430 requests per second against ≈1000 allowed
				if l.Take(&s, now, 1).Allowed {
					admitted++
				}
			}
			if admitted == 0 {
				b.Fatal("nothing was admitted: the benchmark measured only refusals")
			}
		})
	}
}

// BenchmarkPeekFresh is Peek on a key never used, which must not start the
// key's clock and so works on a copy of the state.
func BenchmarkPeekFresh(b *testing.B) {
	for _, l := range benchLimits(b) {
		b.Run(benchName(l), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var s State
				l.Peek(&s, base, 1)
			}
		})
	}
}

// BenchmarkStateEncoding is the Memcached store's per-decision overhead.
func BenchmarkStateEncoding(b *testing.B) {
	l := mustCompile(b, Params{Algorithm: SlidingLog, Limit: 10, Period: time.Second})
	var s State
	for i := range int64(10) {
		l.Take(&s, base+i, 1)
	}
	b.ReportAllocs()
	buf := make([]byte, 0, 128)
	var back State
	for b.Loop() {
		buf, _ = s.AppendBinary(buf[:0])
		if err := back.UnmarshalBinary(buf); err != nil {
			b.Fatal(err)
		}
	}
}
