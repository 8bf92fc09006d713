package storeurl_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storeurl"
)

func ExampleOpen() {
	st, err := storeurl.Open("memory://?max_keys=100000")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	lim, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Hour})
	out := make([]algo.Decision, 1)
	for range 3 {
		res, _ := st.Take(context.Background(), []store.Request{{Key: "k", Limit: lim, Cost: 1}}, out)
		fmt.Println(res.Allowed, out[0].Remaining)
	}
	_, err = storeurl.Open("redis://127.0.0.1:99999")
	fmt.Println(err)
	// Output:
	// true 1
	// true 0
	// false 0
	// storeurl: bad store URL "redis://127.0.0.1:99999": address "127.0.0.1:99999": port must be 1-65535, got "99999"
}
