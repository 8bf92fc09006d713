package memcached_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// A fixed window of 3 per minute on a memcached server, with a clock fixed
// for the example: the fourth call is refused until the window ends.
func ExampleOpen() {
	now := time.Date(2026, 3, 1, 12, 0, 45, 0, time.UTC)
	st, err := memcached.Open("memcached://"+addr,
		memcached.WithClock(func() time.Time { return now }), memcached.WithTimeout(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	l, err := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 3, Period: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	key := fmt.Sprintf("example/%d", time.Now().UnixNano())
	out := make([]algo.Decision, 1)
	for range 4 {
		if _, err := st.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v remaining=%d retry=%v\n", out[0].Allowed, out[0].Remaining, out[0].RetryAfter)
	}
	// Output:
	// allowed=true remaining=2 retry=0s
	// allowed=true remaining=1 retry=0s
	// allowed=true remaining=0 retry=0s
	// allowed=false remaining=0 retry=15s
}

// A token bucket (burst 2, 10 per second) kept under compare-and-swap.
// Stats counts the decisions and the retries that contention from other
// processes would cause (none here).
func ExampleStore_Stats() {
	st, err := memcached.Open("memcached://"+addr,
		memcached.WithClock(func() time.Time { return t0 }), memcached.WithTimeout(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	l, _ := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second, Burst: 2})
	key := fmt.Sprintf("example/%d", time.Now().UnixNano())
	out := make([]algo.Decision, 1)
	for range 3 {
		if _, err := st.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v remaining=%d retry=%v\n", out[0].Allowed, out[0].Remaining, out[0].RetryAfter)
	}
	s := st.Stats()
	fmt.Printf("decisions=%d retries=%d\n", s.CASOps, s.CASRetries)
	// Output:
	// allowed=true remaining=1 retry=0s
	// allowed=true remaining=0 retry=0s
	// allowed=false remaining=0 retry=100ms
	// decisions=3 retries=0
}

func ExampleParseURL() {
	servers, err := memcached.ParseURL("memcached://10.0.0.1:11211,cache-2,[::1]:11212")
	fmt.Println(servers, err)
	_, err = memcached.ParseURL("memcached://10.0.0.1:11211/0")
	fmt.Println(err)
	// Output:
	// [10.0.0.1:11211 cache-2:11211 [::1]:11212] <nil>
	// memcached: store URL "memcached://10.0.0.1:11211/0": unexpected path "/0": only a list of host:port is allowed
}
