package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// abandonLoad runs 32 goroutines taking keys under short random deadlines
// (batches in flight are abandoned, queued calls leave unsent) while the
// script cache is flushed on every node now and then (NOSCRIPT inside
// batches), and checks the accounting: every take admitted is charged
// (none lost), and nothing is charged but the admitted and abandoned
// takes (none charged twice, none left unsent charged).
func abandonLoad(t *testing.T, url string, nodes []string) {
	s := openT(t, url, WithTimeout(time.Second))
	const limit = 1_000_000
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: limit, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	prefix := runKey() + ":abandon:"
	const nkeys = 24
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	var allowed, abandoned, unsent [nkeys]atomic.Int64
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for range 10 {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			for _, a := range nodes {
				_, _ = testserver.RedisDo(a, time.Second, "SCRIPT", "FLUSH")
			}
		}
	}()
	deadlines := []time.Duration{0, 20 * time.Microsecond, 100 * time.Microsecond, 300 * time.Microsecond, time.Millisecond, 3 * time.Millisecond}
	var wg sync.WaitGroup
	var bad atomic.Value
	for g := range 32 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			reqs := make([]store.Request, 1)
			out := make([]algo.Decision, 1)
			for range 300 {
				k := r.IntN(nkeys)
				reqs[0] = store.Request{Key: keys[k], Limit: l, Cost: 1}
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if d := deadlines[r.IntN(len(deadlines))]; d > 0 {
					ctx, cancel = context.WithTimeout(ctx, d)
				}
				res, err := s.Take(ctx, reqs, out)
				cancel()
				refused := out[0]
				// The caller's memory is its own again: a batch that still
				// read or wrote it would be a race.
				reqs[0] = store.Request{}
				out[0] = algo.Decision{}
				switch {
				case err == nil && res.Allowed:
					allowed[k].Add(1)
				case err == nil:
					bad.Store(fmt.Sprintf("take of %s refused (%+v), far below its limit of %d", keys[k], refused, limit))
				case strings.Contains(err.Error(), "not sent"), !errors.Is(err, store.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded):
					unsent[k].Add(1)
				case errors.Is(err, store.ErrUnavailable):
					abandoned[k].Add(1)
				default:
					bad.Store(fmt.Sprintf("take of %s: %v", keys[k], err))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	<-flushed
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	// The batches abandoned end within the store's timeout.
	time.Sleep(1200 * time.Millisecond)
	var totA, totB, totU int64
	for k, key := range keys {
		out := make([]algo.Decision, 1)
		if err := s.Peek(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
		charged := limit - 1 - out[0].Remaining
		a, b, u := allowed[k].Load(), abandoned[k].Load(), unsent[k].Load()
		totA, totB, totU = totA+a, totB+b, totU+u
		if charged < a || charged > a+b {
			t.Errorf("%s: %d charged, with %d takes admitted, %d abandoned in flight, %d not sent: want %d to %d", key, charged, a, b, u, a, a+b)
		}
	}
	t.Logf("%d admitted, %d abandoned in flight, %d not sent", totA, totB, totU)
}

// TestAbandonAccountingStandalone and TestAbandonAccountingCluster: see
// abandonLoad. They passed when written (after 32d86e8, one batcher per
// range of 256 slots on a Cluster).
func TestAbandonAccountingStandalone(t *testing.T) {
	addr := testserver.Redis(t)
	abandonLoad(t, "redis://"+addr, []string{addr})
}

func TestAbandonAccountingCluster(t *testing.T) {
	addrs := testserver.RedisCluster(t)
	abandonLoad(t, "redis-cluster://"+strings.Join(addrs, ","), addrs)
}
