package sim

import (
	"errors"
	"strings"
	"testing"
)

// A --contender that starts with a setting is told that the algorithm or
// strategy comes first, with the text reordered when it holds one: before,
// "name=x gcra" said `want key=value, got "gcra"` and "burst=5" that
// "burst=5" is no algorithm.
func TestContenderKindComesFirst(t *testing.T) {
	for in, want := range map[string]string{
		"name=x gcra": `contender "name=x gcra": the algorithm or strategy comes first: "gcra name=x"`,
		"burst=5 name=y token_bucket instances=2": `the algorithm or strategy comes first: "token_bucket burst=5 name=y instances=2"`,
		"lag=1s": `contender "lag=1s": starts with the setting "lag"; the algorithm (fixed_window, sliding_log, sliding_window, token_bucket, gcra, shaper, smooth_bursty, smooth_warmup, concurrency) or strategy (single, central, local, sticky, async, lease) comes first: "KIND lag=1s"`,
	} {
		_, err := ParseContender(in)
		if err == nil || !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseContender(%q) = %v; want ErrScenario and %q", in, err, want)
		}
	}
	// From the command line: exit 2, and the message.
	code, _, stderr := mainRun(t, "--limit", "5", "--period", "1s", "--duration", "2s", "--rate", "10", "--contender", "name=x gcra")
	if want := `the algorithm or strategy comes first: "gcra name=x"`; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("sim --contender \"name=x gcra\": exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
	}
}
