package resilient_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/resilient"
)

// A store wrapped with the over-limit cache: once the store refuses a key,
// the wrapper answers for it until the retry time, without a store call.
func Example() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	inner, _ := memory.New(memory.WithClock(clock))
	st, _ := resilient.New(inner,
		resilient.WithPolicy(resilient.FailLocal), // decide locally if the store fails
		resilient.WithInstances(4),                // ... on a quarter of each limit
		resilient.WithClock(clock))
	defer st.Close()

	perMinute, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute})
	out := make([]algo.Decision, 1)
	for i := 1; i <= 3; i++ {
		res, _ := st.Take(context.Background(), []store.Request{{Key: "user:42", Limit: perMinute, Cost: 1}}, out)
		fmt.Printf("request %d: allowed=%v remaining=%d retry=%v\n", i, res.Allowed, out[0].Remaining, out[0].RetryAfter)
	}
	fmt.Println("keys known over limit:", st.CachedKeys())
	// Output:
	// request 1: allowed=true remaining=1 retry=0s
	// request 2: allowed=true remaining=0 retry=0s
	// request 3: allowed=false remaining=0 retry=1m0s
	// keys known over limit: 1
}
