package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestWaitCrossSlotRefusalStands: behind wait_replicas (here more than the
// Cluster's replicas, so that no write is acknowledged), an all-or-nothing
// take over two slots, one of which refuses, is refused with no error, as
// a single-slot take the script refused is: the other slot's reservation,
// admitted but not acknowledged, is rolled back and admitted nothing. As
// an error, the failure policy answered it, and --on-store-error open
// admitted a request over its limit.
func TestWaitCrossSlotRefusalStands(t *testing.T) {
	rid := runKey()
	s := openT(t, clusterURL(t)+"?wait_replicas=2&wait_timeout=5ms")
	l, err := algo.Compile(withLimit(exactParams(algo.FixedWindow), 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range []string{"full last", "full first"} {
		t.Run(order, func(t *testing.T) {
			keys := slotKeys(t, "review-wait:"+rid+":"+order+":", 2)
			full, free := store.Request{Key: keys[0], Limit: l, Cost: 1}, store.Request{Key: keys[1], Limit: l, Cost: 1}
			out := make([]algo.Decision, 2)
			// Charged on the master, not acknowledged: an *AckError, and
			// the key's one unit is gone.
			if _, err := s.Take(t.Context(), []store.Request{full}, out[:1]); err == nil {
				t.Fatalf("take of %s: no error; want an *AckError (no write is acknowledged)", full.Key)
			}
			if res, err := s.Take(t.Context(), []store.Request{full}, out[:1]); err != nil || res.Allowed {
				t.Fatalf("take of %s again = %+v, %v; want refused, no error", full.Key, res, err)
			}
			reqs := []store.Request{free, full}
			if order == "full first" {
				reqs = []store.Request{full, free}
			}
			res, err := s.Take(t.Context(), reqs, out)
			if err != nil || res.Allowed {
				t.Errorf("take over %s and %s (%s) = %+v, %v; want refused, no error", full.Key, free.Key, order, res, err)
			}
			peek := []store.Request{{Key: free.Key, Limit: l}}
			if err := s.Peek(t.Context(), peek, out[:1]); err != nil || out[0].Remaining != 1 {
				t.Errorf("peek of %s = %+v, %v; want 1 remaining (its reservation rolled back)", free.Key, out[0], err)
			}
		})
	}
}

// TestWaitPoolExhaustion: behind wait_replicas on a master with no
// replica, every call that writes holds a connection of rueidis' pool for
// blocking commands for WAIT's timeout. 64 goroutines on a pool of 2,
// their contexts ending while they wait for a connection, all finish (no
// deadlock), and the store then keeps no more connections than the pool
// allows plus its pipelining ones.
func TestWaitPoolExhaustion(t *testing.T) {
	rid := runKey()
	srv := testserver.NewRedis(t)
	const pool = 2
	s := openT(t, "redis://"+srv.Addr+"?wait_replicas=1&wait_timeout=20ms", WithBatchSize(1),
		WithClientOption(func(o *rueidis.ClientOption) { o.BlockingPoolSize = pool }))
	admin := openT(t, "redis://"+srv.Addr)
	conns := func() int {
		t.Helper()
		list, err := admin.client.Do(t.Context(), admin.client.B().ClientList().Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(list, "name=floodgate")
	}
	base := conns() // both stores' pipelining connections
	l, err := algo.Compile(withLimit(exactParams(algo.FixedWindow), 1_000_000))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var unacked, timedOut atomic.Int64
	done := make(chan struct{})
	for g := 0; g < 64; g++ {
		wg.Go(func() {
			for i := 0; i < 4; i++ {
				ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
				err := s.Refund(ctx, []store.Request{{Key: fmt.Sprintf("review-pool:%s:%d", rid, g), Limit: l, Cost: 1}})
				cancel()
				var ae *AckError
				var ne net.Error
				switch {
				case errors.As(err, &ae):
					unacked.Add(1)
				case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
					timedOut.Add(1)
				default:
					t.Errorf("refund: %v; want an *AckError or the deadline", err)
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("64 goroutines on a pool of 2 still blocked after 30s")
	}
	t.Logf("%d calls unacknowledged, %d past their deadline", unacked.Load(), timedOut.Load())
	if n := conns() - base; n > pool {
		t.Errorf("%d blocking connections left open after the load; the pool allows %d", n, pool)
	}
}
