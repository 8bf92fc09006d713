package policy

import (
	"context"
	"sync"
	"testing"
)

// Refunding a response a second time, or a copy of it, or from two
// goroutines at once, gives its units back once, as Release and the
// limiter's Cancel are idempotent. Before, a borrowed response refunded
// twice put 2 units back on its ceil, its tenant and the lend pool.
func TestRefundTwiceIsANoOp(t *testing.T) {
	for _, ss := range scenarioStores {
		t.Run(ss.name, func(t *testing.T) {
			e := lendingEngine(t, ss, "requests_per_unit: 1, ceil: 5")
			ctx := context.Background()
			r := req("d", ent("tenant", "a", "user", "u"))
			if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOK {
				t.Fatalf("first: %v %v, want OK on the rate", resp.Code, err)
			}
			before, err := e.Peek(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			for _, how := range []string{"sequential", "concurrent"} {
				resp, err := e.Decide(ctx, r)
				if err != nil || resp.Code != CodeOK || !resp.Statuses[0].Borrowed {
					t.Fatalf("%s: %v %v, want OK borrowed", how, resp.Code, err)
				}
				copied := resp
				if how == "sequential" {
					for _, x := range []Response{resp, resp, copied} {
						if err := e.Refund(ctx, x); err != nil {
							t.Fatal(err)
						}
					}
				} else {
					var wg sync.WaitGroup
					for range 4 {
						wg.Go(func() {
							if err := e.Refund(ctx, copied); err != nil {
								t.Error(err)
							}
						})
					}
					wg.Wait()
				}
				after, err := e.Peek(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := limitsOf(after.Statuses[0]), limitsOf(before.Statuses[0]); got != want {
					t.Fatalf("%s refunds: %s, want %s as before the admission", how, got, want)
				}
			}
		})
	}
}
