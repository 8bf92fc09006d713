package algo

import (
	"slices"
	"testing"
	"time"
)

func TestTokenBucketSteps(t *testing.T) {
	// 10 per second, burst 10: one unit every 100ms.
	l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second})
	s := runSteps(t, l, instants{
		"t0": 0,
		"t1": 100*time.Millisecond - time.Microsecond,
		"t2": 100 * time.Millisecond,
		"t3": 350 * time.Millisecond,
		"t4": 400 * time.Millisecond,
		"t5": 10 * time.Second,
	}, []step{
		// Burst 10 admits exactly 10 at once; the 11th waits one interval.
		{at: "t0", cost: 10, allowed: true, remaining: 0},
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		{at: "t0", cost: 11, allowed: false, remaining: 0, retry: Never},
		{at: "t0", cost: 0, allowed: true, remaining: 0},
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t2", cost: 1, allowed: true, remaining: 0},
		// 2.5 units at 350ms: 3 need another 50ms.
		{at: "t3", cost: 3, allowed: false, remaining: 2, retry: 50 * time.Millisecond},
		{at: "t4", cost: 3, allowed: true, remaining: 0},
		// A clock that steps back is read as t4: no second refill.
		{at: "t3", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		{at: "t4", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		// Long idle: full, and no more than full.
		{at: "t5", op: opPeek, cost: 10, allowed: true, remaining: 0},
		{at: "t5", cost: 4, allowed: true, remaining: 6},
		{at: "t5", op: opRefund, from: "t5", cost: 4},
		{at: "t5", cost: 10, allowed: true, remaining: 0},
		{at: "t5", op: opRefund, from: "t5", cost: 100}, // never above the capacity
		{at: "t5", cost: 10, allowed: true, remaining: 0},
		{at: "t5", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
	})
	if got, want := l.ExpiresAt(s), base+(11*time.Second).Microseconds(); got != want {
		t.Errorf("ExpiresAt = t0+%v, want t0+11s (when the bucket is full again)", time.Duration(got-base)*time.Microsecond)
	}
}

func TestTokenBucketResetAfter(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, Burst: 20})
	var s State
	if d := l.Take(&s, base, 0); d.ResetAfter != 0 || d.Remaining != 20 {
		t.Errorf("fresh bucket: %+v, want Remaining 20 and ResetAfter 0", d)
	}
	if d := l.Take(&s, base, 15); d.ResetAfter != 1500*time.Millisecond {
		t.Errorf("after taking 15: ResetAfter = %v, want 1.5s", d.ResetAfter)
	}
}

func TestTokenBucketInitialTokens(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](0)})
		runSteps(t, l, instants{"t0": 0, "t1": 100 * time.Millisecond, "t2": 1100 * time.Millisecond}, []step{
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
			{at: "t1", cost: 1, allowed: true, remaining: 0},
			{at: "t2", cost: 11, allowed: false, remaining: 10, retry: Never},
			{at: "t2", cost: 10, allowed: true, remaining: 0},
		})
	})
	t.Run("three", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 10, Period: time.Second, InitialTokens: ptr[int64](3)})
		runSteps(t, l, instants{"t0": 0}, []step{
			{at: "t0", cost: 4, allowed: false, remaining: 3, retry: 100 * time.Millisecond},
			{at: "t0", cost: 3, allowed: true, remaining: 0},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 100 * time.Millisecond},
		})
	})
}

func TestTokenBucketBurstAboveRate(t *testing.T) {
	// One per second, up to 5 saved: a client idle for 5s may send 5 at
	// once, then one a second.
	l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 1, Period: time.Second, Burst: 5})
	runSteps(t, l, instants{"t0": 0, "t1": 2500 * time.Millisecond, "t2": 3 * time.Second}, []step{
		{at: "t0", cost: 5, allowed: true, remaining: 0},
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: time.Second},
		{at: "t1", cost: 3, allowed: false, remaining: 2, retry: 500 * time.Millisecond},
		{at: "t2", cost: 3, allowed: true, remaining: 0},
	})
}

// A rate that does not divide the period into whole microseconds is still
// exact: 3 per second refills one unit every 333333.33…µs, and a client
// that always waits RetryAfter on a drained bucket is admitted at the
// rounded-up instants with no drift.
func TestTokenBucketFractionalInterval(t *testing.T) {
	l := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 3, Period: time.Second})
	var s State
	now := base
	if d := l.Take(&s, now, 3); !d.Allowed {
		t.Fatalf("Take(t0, 3) = %+v, want allowed", d)
	}
	var got []int64
	for len(got) < 6 {
		d := l.Take(&s, now, 1)
		if d.Allowed {
			got = append(got, now-base)
			continue
		}
		now += d.RetryAfter.Microseconds()
	}
	want := []int64{333334, 666667, 1000000, 1333334, 1666667, 2000000}
	if !slices.Equal(got, want) {
		t.Fatalf("admitted at %v µs, want %v", got, want)
	}
}

// The bucket's state records whether it is in use apart from its time, so
// a clock that starts at the epoch (a fake clock at zero) does not make a
// used key look fresh again.
func TestTokenBucketAtTimeZero(t *testing.T) {
	for _, k := range []Kind{TokenBucket, GCRA, Shaper} {
		l := mustCompile(t, Params{Algorithm: k, Limit: 10, Period: time.Second, Burst: 5})
		var s State
		n := int64(0)
		for range 20 {
			if l.Take(&s, 0, 1).Allowed {
				n++
			}
		}
		if n != l.Capacity() {
			t.Errorf("%v: 20 takes at time 0 admitted %d, want the capacity %d", k, n, l.Capacity())
		}
	}
}

func TestGCRASteps(t *testing.T) {
	// 2 per second, tolerance of 3 at once.
	l := mustCompile(t, Params{Algorithm: GCRA, Limit: 2, Period: time.Second, Burst: 3})
	runSteps(t, l, instants{"t0": 0, "t1": 499999 * time.Microsecond, "t2": 500 * time.Millisecond, "t3": 2 * time.Second}, []step{
		{at: "t0", cost: 1, allowed: true, remaining: 2},
		{at: "t0", cost: 2, allowed: true, remaining: 0},
		{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
		{at: "t0", cost: 4, allowed: false, remaining: 0, retry: Never},
		{at: "t1", cost: 1, allowed: false, remaining: 0, retry: time.Microsecond},
		{at: "t2", cost: 1, allowed: true, remaining: 0},
		{at: "t3", cost: 3, allowed: true, remaining: 0},
	})
}

func TestShaperSteps(t *testing.T) {
	t.Run("burst 2", func(t *testing.T) {
		// One per second; two may queue behind the one being served.
		l := mustCompile(t, Params{Algorithm: Shaper, Limit: 1, Period: time.Second, Burst: 2})
		runSteps(t, l, instants{"t0": 0, "t1": time.Second, "t2": 1500 * time.Millisecond, "t3": 10 * time.Second}, []step{
			{at: "t0", cost: 1, allowed: true, remaining: 2, delay: 0},
			{at: "t0", cost: 1, allowed: true, remaining: 1, delay: time.Second},
			{at: "t0", cost: 1, allowed: true, remaining: 0, delay: 2 * time.Second},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: time.Second},
			{at: "t0", cost: 4, allowed: false, remaining: 0, retry: Never},
			{at: "t1", cost: 1, allowed: true, remaining: 0, delay: 2 * time.Second},
			{at: "t2", cost: 1, allowed: false, remaining: 0, retry: 500 * time.Millisecond},
			// A request of 2 waits for the water ahead of it only.
			{at: "t3", cost: 2, allowed: true, remaining: 1, delay: 0},
			{at: "t3", cost: 1, allowed: true, remaining: 0, delay: 2 * time.Second},
		})
	})
	t.Run("no queue", func(t *testing.T) {
		l := mustCompile(t, Params{Algorithm: Shaper, Limit: 1, Period: time.Second})
		runSteps(t, l, instants{"t0": 0, "t1": time.Second}, []step{
			{at: "t0", cost: 1, allowed: true, remaining: 0},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: time.Second},
			{at: "t1", cost: 1, allowed: true, remaining: 0},
		})
	})
	t.Run("burst 3 delay 1", func(t *testing.T) {
		// nginx's burst=3 delay=1: the first excess request passes at
		// once, the rest are spaced out.
		l := mustCompile(t, Params{Algorithm: Shaper, Limit: 4, Period: time.Second, Burst: 3, Delay: 1})
		runSteps(t, l, instants{"t0": 0}, []step{
			{at: "t0", cost: 1, allowed: true, remaining: 3, delay: 0},
			{at: "t0", cost: 1, allowed: true, remaining: 2, delay: 0},
			{at: "t0", cost: 1, allowed: true, remaining: 1, delay: 250 * time.Millisecond},
			{at: "t0", cost: 1, allowed: true, remaining: 0, delay: 500 * time.Millisecond},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 250 * time.Millisecond},
		})
	})
	t.Run("delay equal to burst", func(t *testing.T) {
		// nodelay: the whole burst passes at once.
		l := mustCompile(t, Params{Algorithm: Shaper, Limit: 4, Period: time.Second, Burst: 2, Delay: 2})
		runSteps(t, l, instants{"t0": 0}, []step{
			{at: "t0", cost: 3, allowed: true, remaining: 0, delay: 0},
			{at: "t0", cost: 1, allowed: false, remaining: 0, retry: 250 * time.Millisecond},
		})
	})
}

// Lowering a bucket's burst (a configuration reload) while keys keep their
// state must not let a key keep the old, larger capacity.
func TestBucketCapacityLoweredUnderExistingState(t *testing.T) {
	big := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 100, Period: time.Second})
	small := mustCompile(t, Params{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 10})
	var s State
	big.Take(&s, base, 0)
	if d := small.Take(&s, base, 11); d.Allowed {
		t.Fatalf("burst 10 admitted 11 from a state written with burst 100: %+v", d)
	}
	if d := small.Take(&s, base, 10); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("burst 10: Take(10) = %+v, want allowed with nothing left", d)
	}
}
