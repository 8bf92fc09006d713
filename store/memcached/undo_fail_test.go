package memcached_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestRefusalStandsWhenItsUndoFails: a Take that the server refused stays
// refused when the connection fails after the decision, on a command that
// only undoes or tidies (the server failing between two round trips, cut
// here by a proxy that drops the connection sending that command): the
// decr giving back a refused window increment, the cas storing what a
// refused compare-and-swap Take left (one attempt, it charges nothing),
// the roll-back of a multi-key Take, or its reads of what each request
// alone would get. It returns the refusal (with the failure and
// Result.Partial when something stays charged or undecided, with no error
// when nothing does), never the failure alone: store/resilient answered
// that by its policy, and failing open admitted what the server had just
// refused.
func TestRefusalStandsWhenItsUndoFails(t *testing.T) {
	proxy := testserver.NewCutProxy(t, addr)
	clock := newClock(t0.Add(30 * time.Minute))
	s := openURL(t, "memcached://"+proxy.Addr(), clock, memcached.WithTimeout(time.Second))
	rs, err := resilient.New(s, resilient.WithPolicy(resilient.FailOpen), resilient.WithTimeout(5*time.Second), resilient.WithBreaker(1000, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	tests := []struct {
		name  string
		p     algo.Params
		keys  int    // keys of the Take: the first full, the others free
		cut   string // the command whose connection fails
		clean bool   // nothing stays charged or undecided: no error
	}{
		{"fixed window, its decr", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour}, 1, "decr ", false},
		{"sliding window, its decr", algo.Params{Algorithm: algo.SlidingWindow, Limit: 1, Period: time.Hour}, 1, "decr ", false},
		{"token bucket, the refusal's cas", algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour}, 1, "cas ", true},
		{"two fixed windows, the roll-back", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour}, 2, "decr ", false},
		{"two fixed windows, the reads alone", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Hour}, 2, "gets ", false},
		{"two token buckets, the refusal's cas alone", algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour}, 2, "cas ", true},
	}
	for i, tt := range tests {
		l := compile(t, tt.p)
		for _, st := range []struct {
			name string
			st   store.Store
		}{{"store", s}, {"resilient.FailOpen", rs}} {
			var reqs []store.Request
			for k := range tt.keys {
				reqs = append(reqs, store.Request{Key: uniqueKey(t, strconv.Itoa(i)+"-"+strconv.Itoa(k)), Limit: l, Cost: 1})
			}
			out := make([]algo.Decision, len(reqs))
			if _, err := s.Take(ctx(t), reqs[:1], out[:1]); err != nil || !out[0].Allowed {
				t.Fatalf("%s: filling: %+v, %v", tt.name, out[0], err)
			}
			clock.Advance(time.Second) // a refused bucket's state then changes: its cas is sent
			proxy.CutOn(tt.cut)
			cuts := proxy.Cuts()
			res, err := st.st.Take(ctx(t), reqs, out)
			proxy.CutOn("")
			if proxy.Cuts() == cuts {
				t.Errorf("%s through %s: no %q was sent", tt.name, st.name, tt.cut)
			}
			switch {
			case res.Allowed:
				t.Errorf("%s through %s: Take = %+v, %v; want refused (the server refused it)", tt.name, st.name, res, err)
			case st.st == rs && (err != nil || res.Fallback):
				t.Errorf("%s through %s: Take = %+v, %v; want the store's refusal, not the policy's answer", tt.name, st.name, res, err)
			case st.st == s && tt.clean && err != nil:
				t.Errorf("%s through %s: Take = %+v, %v; want a refusal without an error (nothing charged)", tt.name, st.name, res, err)
			case st.st == s && !tt.clean && (err == nil || !res.Partial):
				t.Errorf("%s through %s: Take = %+v, %v; want the failure with Result.Partial", tt.name, st.name, res, err)
			}
			if out[0].Allowed || out[0].Limit != 1 {
				t.Errorf("%s through %s: the full key's decision %+v, want refused, limit 1", tt.name, st.name, out[0])
			}
		}
	}
}
