package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestSplitBatchKeepsCallerDeadline: a coalesced batch the ACL refuses
// for one caller's key is split into its callers' calls (execApart), and
// the calls sent again end at their callers' deadlines, as a lone call
// does. Here the server pauses writes (CLIENT PAUSE WRITE): the ACL
// refuses the batch at once, before the pause holds it, and the allowed
// caller's call, sent again alone, waits for the pause. It waited for the
// split's own timeout (the store's, 2 s here) past its 200 ms deadline:
// 1.5 s, the pause.
func TestSplitBatchKeepsCallerDeadline(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		t.Skip("no redis-server")
	}
	user, pass := aclUser(t, []string{srv.Addr}, append([]string{"~fg:*"}, ACLRules...)...)
	// The window coalesces the two takes into one batch.
	s := openT(t, "redis://"+user+":"+pass+"@"+srv.Addr, WithTimeout(2*time.Second), WithBatchWindow(20*time.Millisecond))
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rid := runKey()
	good, bad := "fg:"+rid+":good", "app:"+rid+":bad"
	if _, err := testserver.RedisDo(srv.Addr, time.Second, "CLIENT", "PAUSE", "1500", "WRITE"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = testserver.RedisDo(srv.Addr, time.Second, "CLIENT", "UNPAUSE") })
	const dl = 200 * time.Millisecond
	var wg sync.WaitGroup
	var goodErr, badErr error
	var goodTook time.Duration
	for _, key := range []string{good, bad} {
		wg.Go(func() {
			// The refused caller's call, sent again on the connection the
			// pause holds, may queue behind the other's: it waits for it.
			d := 5 * time.Second
			if key == good {
				d = dl
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			t0 := time.Now()
			_, err := s.Take(ctx, []store.Request{{Key: key, Limit: l, Cost: 1}}, make([]algo.Decision, 1))
			if key == good {
				goodErr, goodTook = err, time.Since(t0)
			} else {
				badErr = err
			}
		})
	}
	wg.Wait()
	switch {
	case errors.Is(badErr, ErrPermission):
	case errors.Is(badErr, store.ErrUnavailable) && errors.Is(badErr, context.DeadlineExceeded):
		// The refused caller's call, sent again, went on the paused
		// connection behind the other's, and failed with it when the
		// other's deadline closed the connection (docs/STORES.md: the
		// calls queued there fail with it). The split is still shown by
		// the other caller's answer below: an unsplit batch would have
		// had the ACL's refusal.
		t.Logf("take of %s queued behind the other caller's on the paused connection: %v", bad, badErr)
	default:
		t.Fatalf("take of %s: %v; want ErrPermission (the batch was not refused by the ACL, and not split)", bad, badErr)
	}
	if goodTook > dl+150*time.Millisecond {
		t.Errorf("take of %s, split from the refused batch, took %v (%v); want at most its deadline %v + 150 ms", good, goodTook, goodErr, dl)
	}
	if !errors.Is(goodErr, context.DeadlineExceeded) {
		t.Errorf("take of %s: %v; want its deadline's error", good, goodErr)
	}
}
