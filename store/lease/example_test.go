package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/memory"
)

// An instance in front of a shared store (here a memory store standing in
// for Redis) takes ten units at a time: ten decisions, one store call.
func Example() {
	shared, _ := memory.New()
	s, err := lease.New(shared, lease.WithSlice(10), lease.WithTTL(time.Second))
	if err != nil {
		panic(err)
	}
	defer s.Close() // gives unused units back, closes the shared store

	perHour, _ := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 1000, Period: time.Hour})
	out := make([]algo.Decision, 1)
	for range 10 {
		if _, err := s.Take(context.Background(), []store.Request{{Key: "user:42", Limit: perHour, Cost: 1}}, out); err != nil {
			panic(err)
		}
	}
	fmt.Println("allowed:", out[0].Allowed, "remaining:", out[0].Remaining)
	fmt.Println("store calls:", s.Stats().Takes, "decided here:", s.Stats().Local)
	// Output:
	// allowed: true remaining: 990
	// store calls: 1 decided here: 9
}
