package region_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/region"
)

// Two regions share 20 requests an hour. Each decides on its share (10)
// in its own store (here memory stores standing in for each region's
// Redis) and borrows from the other's share when its own is spent: us
// admits 16, eu the 4 left, and together they admit the limit, no more.
func Example() {
	usRedis, _ := memory.New()
	euRedis, _ := memory.New()
	us, err := region.New("us", usRedis, []region.Peer{{Name: "eu", Store: euRedis}})
	if err != nil {
		panic(err)
	}
	defer us.Close() // closes its store and its peer's: both of them here
	eu, err := region.New("eu", euRedis, []region.Peer{{Name: "us", Store: usRedis}})
	if err != nil {
		panic(err)
	}
	params := algo.Params{Algorithm: algo.FixedWindow, Limit: 20, Period: time.Hour}
	limit, err := algo.Compile(params)
	if err != nil {
		panic(err)
	}
	fmt.Println("us's share:", us.Share(limit).Params().Limit)

	admitted := func(st *region.Store, n int) (ok int) {
		l, err := limiter.New(st, "api", params)
		if err != nil {
			panic(err)
		}
		for range n {
			if d, err := l.Allow(context.Background(), "user:42"); err == nil && d.Allowed {
				ok++
			}
		}
		return ok
	}
	fmt.Println("us admits", admitted(us, 16), "of 16")
	fmt.Println("eu admits", admitted(eu, 16), "of 16")
	fmt.Println("us borrowed", us.Stats().Borrowed)
	// Output:
	// us's share: 10
	// us admits 16 of 16
	// eu admits 4 of 16
	// us borrowed 6
}
