package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// A store decides for keys; here two takes over a user's and a tenant's
// key at once, all or nothing, with a fixed clock so the output is stable.
func ExampleNew() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := memory.New(memory.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	user, _ := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Second})
	tenant, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 100, Period: time.Minute})
	reqs := []store.Request{
		{Key: "tenant:acme", Limit: tenant, Cost: 1},
		{Key: "user:alice", Limit: user, Cost: 1},
	}
	out := make([]algo.Decision, len(reqs))
	for i := 0; i < 3; i++ {
		res, err := st.Take(context.Background(), reqs, out)
		if err != nil {
			panic(err)
		}
		fmt.Printf("take %d: allowed=%v tenant remaining=%d user retry=%v\n", i, res.Allowed, out[0].Remaining, out[1].RetryAfter)
	}
	// Output:
	// take 0: allowed=true tenant remaining=99 user retry=0s
	// take 1: allowed=true tenant remaining=98 user retry=0s
	// take 2: allowed=false tenant remaining=98 user retry=500ms
}
