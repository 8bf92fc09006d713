package redis

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// TestCrossSlotFirstSlotRefusedReservesNoOther: the first slot of a
// cross-slot Take is reserved alone, so its refusal is known before the
// other slots are sent: they are looked at (a peek), not reserved and
// rolled back, which cost a round trip more and meanwhile held units on
// their keys that refused other callers of them, for a take refused in
// the end (an abusive client whose own key is spent, every request of it
// refused). review3's finding and test.
func TestCrossSlotFirstSlotRefusedReservesNoOther(t *testing.T) {
	url := clusterURL(t)
	spent, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	keys := slotKeys(t, "fsr:"+runKey()+":", 2)
	s := openT(t, url)
	if res, err := s.Take(t.Context(), []store.Request{{Key: keys[0], Limit: spent, Cost: 1}}, make([]algo.Decision, 1)); err != nil || !res.Allowed {
		t.Fatalf("spend %s: %+v, %v", keys[0], res, err)
	}
	var held []int64
	s.beforeRollback = func() error {
		st, _, err := s.Inspect(t.Context(), keys[1])
		if err != nil {
			return err
		}
		held = append(held, st.B)
		return nil
	}
	out := make([]algo.Decision, 2)
	res, err := s.Take(t.Context(), []store.Request{{Key: keys[0], Limit: spent, Cost: 1}, {Key: keys[1], Limit: l, Cost: 1}}, out)
	if err != nil || res.Allowed {
		t.Fatalf("Take: %+v, %v; want refused", res, err)
	}
	if !out[1].Allowed || out[1].Remaining != 1 {
		t.Errorf("the other key's decision %+v, want it would pass, nothing charged (store.Unwind: 1 left)", out[1])
	}
	if len(held) > 0 {
		t.Errorf("the first slot refused, and %s (limit 1) was reserved anyway (held %v units before the roll-back): a caller of it alone was refused meanwhile", keys[1], held)
	}
}
