package bench

import (
	"testing"
	"time"

	"go.uber.org/ratelimit"
	"golang.org/x/time/rate"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
)

// One limiter object, one caller: the cost of a decision.
func BenchmarkSingleKeySerial(b *testing.B) {
	b.Run("floodgate", func(b *testing.B) {
		l := newLocal(b, neverParams)
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				if !l.Allow() {
					b.Fatal("refused")
				}
			}
		})
	})
	b.Run("floodgate-store", func(b *testing.B) {
		l := newStoreLimiter(b, neverParams)
		ctx := b.Context()
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
					b.Fatal("refused", err)
				}
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(neverRate, neverBurst)
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				if !l.Allow() {
					b.Fatal("refused")
				}
			}
		})
	})
	b.Run("uber-ratelimit", func(b *testing.B) {
		l := ratelimit.New(uberRate, ratelimit.WithoutSlack)
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				l.Take()
			}
		})
	})
}

// One limiter object shared by every goroutine (GOMAXPROCS of them): the
// cost of a decision under contention on one state.
func BenchmarkSingleKeyParallel(b *testing.B) {
	b.Run("floodgate", func(b *testing.B) {
		l := newLocal(b, neverParams)
		b.ReportAllocs()
		measureCPU(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !l.Allow() {
						b.Error("refused")
						return
					}
				}
			})
		})
	})
	b.Run("floodgate-store", func(b *testing.B) {
		l := newStoreLimiter(b, neverParams)
		ctx := b.Context()
		b.ReportAllocs()
		measureCPU(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, err := l.Allow(ctx, "k"); err != nil || !d.Allowed {
						b.Error("refused", err)
						return
					}
				}
			})
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(neverRate, neverBurst)
		b.ReportAllocs()
		measureCPU(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !l.Allow() {
						b.Error("refused")
						return
					}
				}
			})
		})
	})
	b.Run("uber-ratelimit", func(b *testing.B) {
		l := ratelimit.New(uberRate, ratelimit.WithoutSlack)
		b.ReportAllocs()
		measureCPU(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Take()
				}
			})
		})
	})
}

// One limiter that refuses every call after the first: the cost of saying
// no (uber-go/ratelimit cannot refuse; it is not a contender here).
func BenchmarkSingleKeySerialDenied(b *testing.B) {
	b.Run("floodgate", func(b *testing.B) {
		l := newLocal(b, deniedParams)
		l.Allow()
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				if l.Allow() {
					b.Fatal("admitted")
				}
			}
		})
	})
	b.Run("floodgate-store", func(b *testing.B) {
		l := newStoreLimiter(b, deniedParams)
		ctx := b.Context()
		_, _ = l.Allow(ctx, "k")
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				if d, err := l.Allow(ctx, "k"); err != nil || d.Allowed {
					b.Fatal("admitted", err)
				}
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Every(time.Hour), 1)
		l.Allow()
		b.ReportAllocs()
		measureCPU(b, func() {
			for b.Loop() {
				if l.Allow() {
					b.Fatal("admitted")
				}
			}
		})
	})
}

func newLocal(b *testing.B, p algo.Params) *limiter.Local {
	l, err := limiter.NewLocal(p)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func newStoreLimiter(b *testing.B, p algo.Params) *limiter.Limiter {
	st, err := memory.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	l, err := limiter.New(st, "bench", p)
	if err != nil {
		b.Fatal(err)
	}
	return l
}
