package sim_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/floodgate/floodgate/sim"
)

// A client sends 100 requests in the second before a minute boundary and
// 100 in the second after it. A fixed window of 100 a minute admits all
// 200 within one minute; the sliding log admits 100.
func ExampleRun() {
	sc := &sim.Scenario{
		Duration: sim.Duration(2 * time.Minute),
		Limit:    100,
		Period:   sim.Duration(time.Minute),
		Traffic: []sim.Source{{
			Kind: sim.SourceSteady, Rate: 100,
			From: sim.Duration(59 * time.Second), To: sim.Duration(61 * time.Second),
		}},
		Contenders: []sim.Contender{{Algorithm: "fixed_window"}, {Algorithm: "sliding_log"}},
	}
	res, err := sim.Run(context.Background(), sc)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range res.Contenders {
		m := c.Metrics
		fmt.Printf("%s: admitted %d, at most %d in a minute, %d over the limit\n", c.Name, m.Admitted, m.MaxWindow, m.Over)
	}
	// Output:
	// fixed_window: admitted 200, at most 200 in a minute, 100 over the limit
	// sliding_log: admitted 100, at most 100 in a minute, 0 over the limit
}

// Contenders can be written as on the command line.
func ExampleParseContender() {
	c, err := sim.ParseContender("lease algorithm=gcra lease_size=50 rtt=2ms")
	fmt.Println(c.Strategy, c.Algorithm, c.LeaseSize, c.RTT.D(), err)
	// Output: lease gcra 50 2ms <nil>
}

// WriteTable prints the comparison; the same seed always prints the same.
func ExampleWriteTable() {
	sc := &sim.Scenario{
		Seed: 1, Duration: sim.Duration(10 * time.Second), Limit: 10, Period: sim.Duration(time.Second),
		Traffic:    []sim.Source{{Kind: sim.SourcePoisson, Rate: 15}},
		Contenders: []sim.Contender{{Algorithm: "token_bucket"}, {Strategy: sim.StrategyCentral}},
	}
	res, err := sim.Run(context.Background(), sc)
	if err != nil {
		fmt.Println(err)
		return
	}
	sim.WriteTable(os.Stdout, res)
	// Output:
	// scenario sim: 10s simulated, limit 10 per 1s per key, seed 1
	// offered: 134 requests, 134 units; the perfect sliding window admits 90 units
	//
	//   contender                       admitted units  vs ideal  per-key units +/− ideal  over-admitted reqs  under-admitted reqs  wrong decisions  max in a window  added latency avg/max  store calls/decision
	//   ideal (perfect sliding window)      90 (67.2%)     +0.0%            +0.0% / −0.0%            0 (0.0%)             0 (0.0%)             0.0%       10 (1.00×)                  0 / 0                 0.000
	//   token_bucket                       106 (79.1%)    +17.8%           +17.8% / −0.0%          64 (47.8%)             0 (0.0%)            47.8%       17 (1.70×)                  0 / 0                 0.000
	//   central sliding_log rtt 1ms         90 (67.2%)     +0.0%            +0.0% / −0.0%            0 (0.0%)             0 (0.0%)             0.0%       10 (1.00×)          1.0ms / 1.0ms                 1.000
	//
	// admitted units: units admitted (and their share of the units offered); vs ideal: relative to the ideal's admitted units.
	// per-key units +/− ideal: for each key, the units admitted beyond (+) and short of (−) what the ideal admitted
	//   for the same key over the run, summed over the keys, relative to the ideal's admitted units: the error in units.
	// over-admitted reqs: requests admitted although their key already had the limit in the trailing window;
	// under-admitted reqs: requests refused although they would have fitted; both judged on the contender's own
	//   history and counted in decisions, with their share of all decisions. Wrong decisions: the two together.
	//   They grow with the offered load: under a steady overload, a contender that spaces requests out (smooth_bursty,
	//   a shaper) can admit the ideal's units and still refuse many requests that would have fitted.
}
