package policy

import (
	"context"
	"testing"
)

// Two descriptors of one request that borrow from the same lend pool
// charge it once with the larger of their costs, as any key shared by two
// descriptors (it took the first one's: 1 of 3 borrowed units counted, and
// lendable could be passed).
func TestLendPoolChargedTheLargerCost(t *testing.T) {
	for _, ss := range scenarioStores {
		t.Run(ss.name, func(t *testing.T) {
			e := lendingEngine(t, ss, "requests_per_unit: 1, ceil: 10")
			ctx := context.Background()
			r := req("d", ent("tenant", "a", "user", "u1"), ent("tenant", "a", "user", "u2"))
			if resp, err := e.Decide(ctx, r); err != nil || resp.Code != CodeOK || resp.Statuses[0].Borrowed {
				t.Fatalf("first: %v %v, want OK on the users' rates", resp.Code, err)
			}
			r.Descriptors[0].Hits, r.Descriptors[1].Hits = 1, 3
			resp, err := e.Decide(ctx, r)
			if err != nil || resp.Code != CodeOK || !resp.Statuses[0].Borrowed || !resp.Statuses[1].Borrowed {
				t.Fatalf("second: %v %v, want OK, both borrowed", resp.Code, err)
			}
			for i, s := range resp.Statuses {
				for _, l := range s.Limits {
					if l.Name == "tenant/lend" && l.Decision.Remaining != 50-3 {
						t.Errorf("descriptor %d: lend pool remaining %d, want 47 (3 borrowed units)", i, l.Decision.Remaining)
					}
				}
			}
		})
	}
}
