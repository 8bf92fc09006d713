package main

import (
	"strings"
	"testing"
)

// TestServeStopLineFirst: on a stop, the line that says why and what
// follows ("stop requested: draining: …") comes before the server's
// "draining: n request(s) in flight" and "floodgate stopped". Both
// watched the same context, so the order was a race the drain line often
// won; repeated starts and stops catch it.
func TestServeStopLineFirst(t *testing.T) {
	dir, _ := writeConfig(t, observeConfig)
	for i := range 8 {
		_, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0")
		if code := stop(); code != 0 {
			t.Fatalf("stop %d: exit %d: %s", i, code, errb.String())
		}
		log := errb.String()
		why, drain, stopped := strings.Index(log, "stop requested: draining:"), strings.Index(log, `msg="draining: `), strings.Index(log, `msg="floodgate stopped"`)
		if why < 0 || drain < 0 || stopped < 0 {
			t.Fatalf("stop %d: the log lacks a stop line (why %d, drain %d, stopped %d):\n%s", i, why, drain, stopped, log)
		}
		if why > drain || drain > stopped {
			t.Fatalf("stop %d: the reason is logged after the drain (why at %d, drain at %d, stopped at %d):\n%s", i, why, drain, stopped, log)
		}
	}
}
