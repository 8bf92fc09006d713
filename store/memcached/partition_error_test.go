package memcached_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestDeadServerPlaced: with one server of a ring of two dead, a Take, a
// Peek or a Refund over a key of each names the dead server's partition
// as failed. Each reaches its servers at once, so the live one did its
// part (a reserved charge rolled back, a read, a refund) in either order
// and none is skipped (a Peek and a Refund went key after key, and with
// the dead server's key first skipped the live one). A call over the live
// server alone succeeds, and one over the dead server alone fails with a
// plain error. store/resilient counts the failure against the dead
// server's breaker only.
func TestDeadServerPlaced(t *testing.T) {
	a, b := testserver.NewMemcached(t), testserver.NewMemcached(t)
	if a == nil || b == nil {
		t.Skip("no memcached")
	}
	s, err := memcached.Open("memcached://"+a.Addr+","+b.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var live, dead string
	for i := 0; live == "" || dead == ""; i++ {
		k := "pe:" + strconv.Itoa(i)
		if s.ServerFor(k) == a.Addr {
			live = k
		} else {
			dead = k
		}
	}
	pd := s.Partition(dead)
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []algo.Kind{algo.TokenBucket, algo.FixedWindow} {
		l, err := algo.Compile(algo.Params{Algorithm: k, Limit: 100, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for _, keys := range [][]string{{live, dead}, {dead, live}} {
			reqs := []store.Request{{Key: keys[0], Limit: l, Cost: 1}, {Key: keys[1], Limit: l, Cost: 1}}
			_, err := s.Take(t.Context(), reqs, make([]algo.Decision, 2))
			checkPlaced(t, "Take", k, keys, err, []int{pd}, nil)
			err = s.Peek(t.Context(), reqs, make([]algo.Decision, 2))
			checkPlaced(t, "Peek", k, keys, err, []int{pd}, nil)
			err = s.Refund(t.Context(), reqs)
			checkPlaced(t, "Refund", k, keys, err, []int{pd}, nil)
		}
		peek := make([]algo.Decision, 1)
		if err := s.Peek(t.Context(), []store.Request{{Key: live, Limit: l}}, peek); err != nil || peek[0].Remaining != 100 {
			t.Errorf("%v: Peek(live) = %+v, %v; want nothing charged (the reservation rolled back)", k, peek[0], err)
		}
		_, err = s.Take(t.Context(), []store.Request{{Key: dead, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		var pe *store.PartitionError
		if err == nil || errors.As(err, &pe) {
			t.Errorf("%v: Take(dead) alone: %v, want a plain error", k, err)
		}
	}
}

func checkPlaced(t *testing.T, op string, k algo.Kind, keys []string, err error, failed, skipped []int) {
	t.Helper()
	var pe *store.PartitionError
	if !errors.As(err, &pe) {
		t.Errorf("%v: %s%v: error %v names no partition, want a *store.PartitionError", k, op, keys, err)
		return
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("%v: %s%v: %v does not wrap store.ErrUnavailable", k, op, keys, err)
	}
	if !slices.Equal(pe.Failed, failed) || !slices.Equal(pe.Skipped, skipped) {
		t.Errorf("%v: %s%v: failed %v, skipped %v; want %v, %v", k, op, keys, pe.Failed, pe.Skipped, failed, skipped)
	}
}
