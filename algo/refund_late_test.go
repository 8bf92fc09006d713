package algo

import (
	"math/rand/v2"
	"testing"
	"time"
)

// A bucket's refund of a take made earlier gave back the take's whole
// cost, capped at the capacity, as if the bucket had been short of it all
// along. But a bucket that would have been full meanwhile had the take not
// happened wasted refill the charged one kept: capacity 10 at 10/s, a
// reservation of 5 at t, 10 taken at t+5s (the bucket full again), then
// the reservation cancelled: it gave back 5, and 5 more were admitted at
// t+5s, 15 at one instant on a capacity of 10. A refund gives back at
// most the cost less what refilled since the take, the most the bucket
// can have lost to the take: the state is then that of a take of no more
// than what it refilled.
func TestBucketLateRefund(t *testing.T) {
	const t0 = int64(1_700_000_000_000_000)
	sec := int64(time.Second / time.Microsecond)
	for _, k := range []Kind{TokenBucket, GCRA, Shaper} {
		t.Run(k.String(), func(t *testing.T) {
			burst := int64(10)
			if k == Shaper {
				burst = 9 // capacity Burst+1
			}
			l, err := Compile(Params{Algorithm: k, Limit: 10, Period: time.Second, Burst: burst})
			if err != nil {
				t.Fatal(err)
			}
			var s State
			steps := []struct {
				at      int64
				refund  int64 // the cost of the take at t0 to refund, or take cost
				take    int64
				allowed bool
				remain  int64
			}{
				{at: t0, take: 5, allowed: true, remain: 5},
				{at: t0 + 5*sec, take: 10, allowed: true, remain: 0}, // full again: 5s of refill, 5 of it wasted
				{at: t0 + 5*sec, refund: 5, remain: 0},               // nothing of it was lost to the take
				{at: t0 + 5*sec, take: 5, allowed: false, remain: 0}, // 15 at one instant before
				{at: t0 + 5*sec + 200_000, take: 2, allowed: true, remain: 0},
				{at: t0 + 5*sec + 200_000, take: 0, allowed: true, remain: 0},
			}
			for i, st := range steps {
				if st.refund > 0 {
					l.Refund(&s, st.at, t0, st.refund)
					if d := l.Peek(&s, st.at, 0); d.Remaining != st.remain {
						t.Fatalf("step %d: after Refund(t+%dµs, at t, %d): Remaining %d, want %d", i, st.at-t0, st.refund, d.Remaining, st.remain)
					}
					continue
				}
				d := l.Take(&s, st.at, st.take)
				if d.Allowed != st.allowed || d.Remaining != st.remain {
					t.Fatalf("step %d: Take(t+%dµs, %d) = allowed %v remaining %d, want %v %d", i, st.at-t0, st.take, d.Allowed, d.Remaining, st.allowed, st.remain)
				}
			}
		})
	}
	// Given back at once (an all-or-nothing roll-back), or before any
	// refill, the whole cost comes back.
	l, err := Compile(Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var s State
	l.Take(&s, t0, 10)
	l.Refund(&s, t0, t0, 4)
	if d := l.Peek(&s, t0, 0); d.Remaining != 4 {
		t.Fatalf("a refund of 4 at the take's instant leaves Remaining %d, want 4", d.Remaining)
	}
	l.Take(&s, t0, 4)
	l.Refund(&s, t0+50_000, t0, 6) // 0.5 units refilled since, the bucket short all along
	if d := l.Peek(&s, t0+50_000, 0); d.Remaining != 6 {
		t.Fatalf("a refund of 6 taken 50ms before at 10/s, 4 taken since, leaves Remaining %d, want 6 (0.5 refilled + 5.5 given back)", d.Remaining)
	}
}

// Random histories of takes and refunds of earlier takes, at later
// instants, the clock stepping back at times (a refund's at is then before
// its take's stamp): what stays admitted (refunded takes left out) in any
// span is at most the capacity plus what refills in the span.
func TestBucketRefundBoundRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	type adm struct {
		at, seen, cost int64 // the take's now, and the state's time it took at
		refunded       bool
	}
	for iter := range 3000 {
		k := []Kind{TokenBucket, GCRA, Shaper}[iter%3]
		p := randomParams(r, k)
		l, err := Compile(p)
		if err != nil {
			t.Fatalf("Compile(%+v): %v", p, err)
		}
		per := l.periodUS
		var s State
		var got []adm
		now := int64(1_700_000_000_000_000)
		seen := int64(0) // the state's time: the latest now of its ops
		for op := range 200 {
			switch r.IntN(8) {
			case 0, 1:
			case 2:
				now -= r.Int64N(per) // the clock steps back
			default:
				now += r.Int64N(2 * per / max(l.p.Limit, 1))
			}
			if len(got) > 0 && r.IntN(3) == 0 {
				j := r.IntN(len(got))
				if !got[j].refunded {
					seen = max(seen, now)
					got[j].refunded = true
					l.Refund(&s, now, got[j].at, got[j].cost)
				}
				continue
			}
			cost := 1 + r.Int64N(l.Capacity())
			seen = max(seen, now)
			if d := l.Take(&s, now, cost); !d.Allowed {
				continue
			}
			got = append(got, adm{at: now, seen: seen, cost: cost})
			var n int64
			for j := len(got) - 1; j >= 0; j-- {
				if got[j].refunded {
					continue
				}
				n += got[j].cost
				span := seen - got[j].seen
				if bound := l.Capacity() + l.p.Limit*span/per; n > bound {
					t.Fatalf("%v, op %d: %d admitted and not given back in a span of %dµs, over capacity %d + rate × span = %d", l, op, n, span, l.Capacity(), bound)
				}
			}
		}
	}
}

// A SmoothBursty reservation cancelled after the limiter had filled its
// store again and spent it gave back the whole cost's ticket time: a
// request that would have waited 5s passed at once, 15 units at one
// instant on a burst of 5 at 1/s. The refund now gives back the ticket
// time less what the permits stored since the take are worth.
func TestSmoothLateRefund(t *testing.T) {
	l, err := Compile(Params{Algorithm: SmoothBursty, Limit: 1, Period: time.Second, MaxBurstSeconds: 5, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const t0 = int64(1_700_000_000_000_000)
	sec := int64(time.Second / time.Microsecond)
	var s State
	l.Take(&s, t0-100*sec, 0) // in use long before: the store full
	if d := l.Take(&s, t0, 5); !d.Allowed || d.Delay != 0 {
		t.Fatalf("Take(t, 5) = %+v, want admitted at once", d)
	}
	t5 := t0 + 5*sec
	for _, want := range []time.Duration{0, 0} {
		if d := l.Take(&s, t5, 5); !d.Allowed || d.Delay != want {
			t.Fatalf("Take(t+5s, 5) = %+v, want admitted with Delay %v", d, want)
		}
	}
	l.Refund(&s, t5, t0, 5)
	if d := l.Take(&s, t5, 5); !d.Allowed || d.Delay != 5*time.Second {
		t.Fatalf("after the refund of the take at t, Take(t+5s, 5) = %+v, want Delay 5s, as if it had not been made", d)
	}
	// A refund at the take's instant gives the ticket time back: the
	// third take waits 5s, not 10s.
	var u State
	l.Take(&u, t0, 0)
	l.Take(&u, t0, 5)
	l.Take(&u, t0, 5)
	l.Refund(&u, t0, t0, 5)
	if d := l.Take(&u, t0, 5); !d.Allowed || d.Delay != 5*time.Second {
		t.Fatalf("after a refund at the take's instant, Take(t, 5) = %+v, want Delay 5s", d)
	}
}
