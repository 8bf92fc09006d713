package memcached_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestFullServerWithoutEviction: a memcached started with -M refuses new
// items once its memory is used up ("SERVER_ERROR out of memory storing
// object"). The store's error names the cause and what to do, wrapping
// store.ErrUnavailable (the failure policy answers); it used to carry
// gomemcache's raw text only.
func TestFullServerWithoutEviction(t *testing.T) {
	srv := testserver.NewMemcached(t, "-M", "-m", "2")
	// The fixed window is an hour on the store's clock: a clock that
	// stands still keeps the two takes of its counters in one window, as
	// the real one does not when an hour ends while the server fills.
	s, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(5*time.Second), memcached.WithClock(newClock(t0).Now))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1, Period: time.Hour, Burst: 50})
	out := make([]algo.Decision, 1)
	prefix := uniqueKey(t, "full")
	// Window counters made before the server filled up still count, in a
	// Take of several keys too (whose add of each counter the full server
	// refuses even when it exists).
	win := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	wreqs := []store.Request{{Key: prefix + "w1", Limit: win, Cost: 1}, {Key: prefix + "w2", Limit: win, Cost: 1}}
	if _, err := s.Take(c, wreqs, make([]algo.Decision, 2)); err != nil {
		t.Fatal(err)
	}
	var full error
	for i := 0; i < 200_000 && full == nil; i++ {
		if _, err := s.Take(c, []store.Request{{Key: fmt.Sprintf("%s-%d", prefix, i), Limit: l, Cost: 1}}, out); err != nil {
			full = err
		}
	}
	if full == nil {
		t.Fatal("200 000 new keys on a memcached with -M -m 1: none refused")
	}
	wout := make([]algo.Decision, 2)
	if res, err := s.Take(c, wreqs, wout); err != nil || !res.Allowed || wout[0].Remaining != 98 {
		t.Errorf("existing window counters on the full server: %+v %+v, %v; want counted", res, wout, err)
	}
	if !errors.Is(full, store.ErrUnavailable) || !strings.Contains(full.Error(), "started with -M") || !strings.Contains(full.Error(), "raise its -m") {
		t.Errorf("a full -M server's refusal: %v; want ErrUnavailable naming -M and -m", full)
	}
}
