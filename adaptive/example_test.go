package adaptive_test

import (
	"fmt"
	"log"
	"time"

	"github.com/floodgate/floodgate/adaptive"
)

// A rule's rate follows its backend's p99 latency: down by 30% per slow
// interval, back up by 0.05 per healthy one. The server would call Step from
// Run on a ticker; here the clock is explicit.
func Example() {
	c, err := adaptive.New(adaptive.Config{
		Min:              0.1,
		Max:              1,
		LatencyThreshold: 100 * time.Millisecond,
		ErrorRatio:       0.05,
		MinSamples:       10,
	})
	if err != nil {
		log.Fatal(err)
	}
	const rate = 1000 // the rule's configured requests per second
	now := time.Unix(1_700_000_000, 0)
	for _, interval := range []struct {
		latency time.Duration
		failed  int
	}{
		{180 * time.Millisecond, 0},
		{60 * time.Millisecond, 12},
		{40 * time.Millisecond, 0},
	} {
		for i := range 100 {
			c.Observe(interval.latency, i < interval.failed)
		}
		now = now.Add(time.Second)
		ch := c.Step(now)
		fmt.Printf("%v; rate %.0f/s\n", ch, rate*c.Factor())
	}
	// Output:
	// factor 1 -> 0.7: p99 latency 180ms > 100ms threshold; rate 700/s
	// factor 0.7 -> 0.49: error ratio 12% > 5%; rate 490/s
	// factor 0.49 -> 0.54: recovered: p99 40ms, error ratio 0%; rate 540/s
}
