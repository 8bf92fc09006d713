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

// TestAbandonAccountingSplit: 16 callers take two keys under random
// deadlines of 50 us to 3 ms (or none), one key the ACL lets the user
// reach and one it refuses, so that their batches are split apart
// (execApart) while callers leave: the refused key is never admitted, the
// other's charges are between its admitted takes and those plus the
// takes abandoned in flight (none charged twice), and a caller reusing
// its requests and decisions at once races with no batch (-race).
func TestAbandonAccountingSplit(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var url string
			rid := runKey()
			good, bad := "fg:"+rid+":good", "app:"+rid+":bad"
			rules := append([]string{"~fg:*"}, ACLRules...)
			if mode == "standalone" {
				addr := testserver.Redis(t)
				user, pass := aclUser(t, []string{addr}, rules...)
				url = "redis://" + user + ":" + pass + "@" + addr
			} else {
				nodes := testserver.RedisCluster(t)
				user, pass := aclUser(t, nodes, rules...)
				url = "redis-cluster://" + user + ":" + pass + "@" + strings.Join(nodes, ",")
				good, bad = "fg:{"+rid+"}:good", "app:{"+rid+"}:bad"
			}
			s := openT(t, url, WithTimeout(time.Second))
			l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1_000_000, Period: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			var admitted, abandoned, unsent, perm atomic.Int64
			var badv atomic.Value
			var wg sync.WaitGroup
			dls := []time.Duration{0, 50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond}
			for g := range 16 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 3))
					reqs := make([]store.Request, 1)
					out := make([]algo.Decision, 1)
					for range 300 {
						key := good
						if r.IntN(2) == 0 {
							key = bad
						}
						reqs[0] = store.Request{Key: key, Limit: l, Cost: 1}
						ctx, cancel := context.Background(), context.CancelFunc(func() {})
						if d := dls[r.IntN(len(dls))]; d > 0 {
							ctx, cancel = context.WithTimeout(ctx, d)
						}
						res, err := s.Take(ctx, reqs, out)
						cancel()
						reqs[0] = store.Request{}
						out[0] = algo.Decision{}
						switch {
						case key == bad:
							if err == nil {
								badv.Store(fmt.Sprintf("take of %s (outside the ACL) admitted", key))
							} else if errors.Is(err, ErrPermission) {
								perm.Add(1)
							}
						case err == nil && res.Allowed:
							admitted.Add(1)
						case err == nil:
							badv.Store(fmt.Sprintf("take of %s refused, far below its limit", key))
						case strings.Contains(err.Error(), "not sent"), !errors.Is(err, store.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded):
							unsent.Add(1)
						case errors.Is(err, store.ErrUnavailable):
							abandoned.Add(1)
						default:
							badv.Store(fmt.Sprintf("take of %s: %v", key, err))
						}
					}
				})
			}
			wg.Wait()
			if v := badv.Load(); v != nil {
				t.Fatal(v)
			}
			time.Sleep(1200 * time.Millisecond) // the batches abandoned end within the store's timeout
			out := make([]algo.Decision, 1)
			if err := s.Peek(context.Background(), []store.Request{{Key: good, Limit: l, Cost: 1}}, out); err != nil {
				t.Fatal(err)
			}
			charged := 1_000_000 - 1 - out[0].Remaining
			a, b := admitted.Load(), abandoned.Load()
			t.Logf("%s: %d charged; %d takes admitted, %d abandoned in flight, %d not sent; %d refused by the ACL", good, charged, a, b, unsent.Load(), perm.Load())
			if charged < a || charged > a+b {
				t.Errorf("%s: %d charged, with %d takes admitted and %d abandoned in flight: want %d to %d", good, charged, a, b, a, a+b)
			}
		})
	}
}
