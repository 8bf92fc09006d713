package storetest

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/algo"
)

// TestTraceExpectations checks every scenario file's expected decisions
// against the pure reference alone, with no store: a failure here is a
// wrong trace or a change in the algo package, not a store bug.
func TestTraceExpectations(t *testing.T) {
	traces, err := loadTraces()
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) < 10 {
		t.Fatalf("loaded %d traces, want the whole testdata folder", len(traces))
	}
	for _, tr := range traces {
		kinds := []algo.Kind{0}
		if tr.star {
			kinds = algo.Kinds()
		}
		for _, k := range kinds {
			t.Run(tr.file+"/"+k.String(), func(t *testing.T) {
				runTrace(t, tr, k, nil, NewClock(Epoch))
			})
		}
	}
}

func TestParseTraceErrors(t *testing.T) {
	cases := []struct{ text, want string }{
		{"", "x.txt:1: no limit declared"},
		{"limit bogus 1/1s", "x.txt:1: invalid limit: unknown algorithm"},
		{"limit token_bucket 1/1s\nat 1s take u 1\nat 0 take u 1", "x.txt:3: time 0s is before"},
		{"limit token_bucket x/1s", "x.txt:1: limit \"x\""},
		{"limit token_bucket 1/1s\nat 0 take u", "x.txt:2: key \"u\": missing cost"},
		{"limit token_bucket 1/1s\nat 0 take u@v 1", "x.txt:2: key \"u\": no limit named \"v\""},
		{"limit token_bucket 1/1s\nat 0 take u 1 -> maybe", "x.txt:2: expected \"maybe\""},
		{"limit token_bucket 1/1s\nat 0 take u 1 -> allowed remaining=x", "x.txt:2: remaining \"x\""},
		{"limit * 1/1s\nat 0 take u 1 -> allowed", "x.txt:2: a trace for every algorithm"},
		{"limit token_bucket 1/1s\nat 0 release u", "x.txt:2: release needs lease=N"},
		{"limit token_bucket 1/1s\nat 0 refund u 1 -> allowed", "x.txt:2: refund cannot expect"},
		{"limit token_bucket 1/1s burst=-1", "x.txt:1: invalid limit: burst"},
		{"limit token_bucket 1/1s frob=1", "x.txt:1: option frob: unknown option"},
		{"limit token_bucket 1/1s\nlimit gcra 1/1s", "x.txt:2: limit \"\" declared twice"},
		{"limit a: token_bucket 1/1s\nlimit gcra 1/1s", "x.txt:1: with several limits"},
		{"hello", "x.txt:1: unknown directive \"hello\""},
	}
	for _, c := range cases {
		_, err := parseTrace("x.txt", c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTrace(%q) = %v, want an error containing %q", c.text, err, c.want)
		}
	}
}
