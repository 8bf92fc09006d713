package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every contender keeps a table indexed by key up to the highest key index,
// whatever the number of requests: --keys 16000000 with the default
// contenders needed tens of GB and the run was killed for lack of memory.
// A run whose tables would not fit in the bound is refused before it
// allocates them, with the bound in the message.
func TestSimRefusesKeyTablesOverBound(t *testing.T) {
	old := maxKeyTableBytes
	maxKeyTableBytes = 1 << 20
	defer func() { maxKeyTableBytes = old }()
	sc := &Scenario{
		Duration: sec(1), Limit: 10, Period: sec(1), Instances: 4,
		Traffic:    []Source{{Kind: SourceSteady, Rate: 10, Keys: 100_000}},
		Contenders: []Contender{{Strategy: StrategyLocal}},
	}
	_, err := Run(context.Background(), sc)
	if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), "100000 keys") || !strings.Contains(err.Error(), "over the bound of 1.0 MiB") {
		t.Fatalf("Run over 100,000 keys with a 1 MiB bound: err %v, want a bad scenario naming the keys and the bound", err)
	}
	sc = &Scenario{
		Duration: sec(1), Limit: 10, Period: sec(1), Instances: 4,
		Traffic:    []Source{{Kind: SourceSteady, Rate: 10, Keys: 100}},
		Contenders: []Contender{{Strategy: StrategyLocal}},
	}
	if _, err := Run(context.Background(), sc); err != nil {
		t.Fatalf("Run over 100 keys: %v", err)
	}
}

// A report written into the folder of an earlier one and failing half-way
// (here series.csv on a full disk) must not leave the earlier index.html,
// which would present the old table beside the new charts as a complete
// report.
func TestSimFailedReportLeavesNoStaleIndex(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	dir := t.TempDir()
	index := filepath.Join(dir, "index.html")
	if err := os.WriteFile(index, []byte("the earlier run"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", filepath.Join(dir, "series.csv")); err != nil {
		t.Fatal(err)
	}
	sc := &Scenario{
		Duration: sec(2), Limit: 10, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 20}},
		Contenders: []Contender{{Algorithm: "fixed_window"}},
	}
	err := WriteReport(dir, run(t, sc))
	if err == nil || !strings.Contains(err.Error(), "series.csv") {
		t.Fatalf("WriteReport with series.csv on a full disk: err %v, want one naming series.csv", err)
	}
	if b, err := os.ReadFile(index); err == nil {
		t.Fatalf("index.html after a failed report: %q, want none", b)
	}
}

// A replayed log is read into memory whole (about 43 bytes a request at its
// peak, measured over 20 million lines of "0 a"): a log of hundreds of
// millions of short lines exhausted the memory instead of being refused.
// Past the bound the log is refused at the line that crosses it.
func TestSimReplayOverBoundRefused(t *testing.T) {
	old := maxReplayRequests
	maxReplayRequests = 3
	defer func() { maxReplayRequests = old }()
	_, _, err := readReplay("big.log", strings.NewReader("0 a\n0 a\n# note\n1 b\n2 a\n"), 0)
	if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), "big.log:5: more than 3 requests") {
		t.Fatalf("readReplay of 4 requests with a bound of 3: err %v, want big.log:5 over the bound", err)
	}
	if _, _, err := readReplay("ok.log", strings.NewReader("0 a\n0 a\n1 b\n"), 0); err != nil {
		t.Fatalf("readReplay of 3 requests with a bound of 3: %v", err)
	}
}

// The count charts and the CSV's window columns follow the focus key: a
// focus_key no source sends to drew flat zero lines titled with that key,
// and a source starting after the end of the run sent nothing, both
// without a word. Both are refused.
func TestSimRefusesFocusKeyWithoutTrafficAndLateSource(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"focus past the keys", "duration: 10s\nlimit: 10\nperiod: 1s\nfocus_key: 5\ntraffic:\n  - kind: steady\n    rate: 5\n    keys: 2\n",
			"focus_key: no traffic source sends to key 5 (their keys: 0-1)"},
		{"focus below an offset", "duration: 10s\nlimit: 10\nperiod: 1s\ntraffic:\n  - kind: steady\n    rate: 5\n    key_offset: 3\n    keys: 2\n",
			"focus_key: no traffic source sends to key 0 (their keys: 3-4)"},
		{"from after the end", "duration: 10s\nlimit: 10\nperiod: 1s\ntraffic:\n  - kind: steady\n    rate: 5\n    from: 20s\n",
			"t.yaml:5: traffic[0] (steady): from: 20s is not before the end of the run (10s)"},
	} {
		sc, err := ParseScenario("t.yaml", []byte(tc.yaml))
		if err == nil {
			_, err = Run(context.Background(), sc)
		}
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want a bad scenario with %q", tc.name, err, tc.want)
		}
	}
	sc, err := ParseScenario("t.yaml", []byte("duration: 10s\nlimit: 10\nperiod: 1s\nfocus_key: 4\ntraffic:\n  - kind: steady\n    rate: 5\n    key_offset: 3\n    keys: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), sc); err != nil {
		t.Errorf("focus_key 4 of keys 3-4: %v", err)
	}
}

// A flash crowd was thinned at its peak over the whole run: a crowd to
// 1,000,000/s for 1 s in an hour at 1/s drew 3.6 billion candidates (80 s)
// for its million requests. Each segment is now thinned at its own bound;
// the count stays what the shape asks for (3,599 + 1,000,000 expected).
func TestSimFlashCrowdGeneratesInTimeOfItsRequests(t *testing.T) {
	sc := &Scenario{
		Duration: Duration(time.Hour), Limit: 10, Period: sec(1),
		Traffic: []Source{{Kind: SourceFlash, Rate: 1, Peak: 1_000_000, At: Duration(10 * time.Minute), Hold: sec(1)}},
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	g := newRateGen(sc, &sc.Traffic[0], 0)
	deadline := time.Now().Add(10 * time.Second)
	var n, inCrowd int64
	for {
		a, ok := g.next()
		if !ok {
			break
		}
		n++
		if a.t >= int64(10*time.Minute/time.Microsecond) && a.t < int64((10*time.Minute+time.Second)/time.Microsecond) {
			inCrowd++
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s, %d requests generated (of about 1,003,600): the generator draws far more candidates than requests", n)
		}
	}
	if inCrowd < 995_000 || inCrowd > 1_005_000 || n-inCrowd < 3_400 || n-inCrowd > 3_800 {
		t.Errorf("%d requests in the crowd's second and %d outside it; want about 1,000,000 and 3,599", inCrowd, n-inCrowd)
	}
}

// --rate 1e7 over 400 days (3.5 × 10^14 requests) was accepted and would
// have run for years behind a progress bar. A run whose generated traffic
// is expected to exceed the bound is refused with the estimate.
func TestSimRefusesTrafficOverRequestBound(t *testing.T) {
	old := maxGeneratedRequests
	maxGeneratedRequests = 1000
	defer func() { maxGeneratedRequests = old }()
	sc := &Scenario{
		Duration: sec(20), Limit: 10, Period: sec(1),
		Traffic: []Source{{Kind: SourceSteady, Rate: 100}},
	}
	_, err := Run(context.Background(), sc)
	if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), "about 2e+03 requests, over the bound of 1e+03") {
		t.Fatalf("2,000 requests with a bound of 1,000: err %v, want a bad scenario with the estimate and the bound", err)
	}
	sc = &Scenario{
		Duration: sec(20), Limit: 10, Period: sec(1),
		Traffic: []Source{{Kind: SourceFlash, Rate: 10, Peak: 1000, At: sec(5), Hold: Duration(500 * time.Millisecond)}},
	}
	if _, err := Run(context.Background(), sc); err != nil {
		t.Fatalf("a flash crowd of about 700 requests: %v", err)
	}
}

// The count charts plot units (the perfect window's and the algorithm's
// counts both add each request's cost), but their axis said "requests"
// even when every request cost 3.
func TestSimCountChartSaysUnitsWhenRequestsCostMore(t *testing.T) {
	for _, tc := range []struct {
		cost int64
		want string
	}{{1, "requests counted in the last 1s"}, {3, "units counted in the last 1s"}} {
		sc := &Scenario{
			Duration: sec(3), Limit: 10, Period: sec(1),
			Traffic:    []Source{{Kind: SourceSteady, Rate: 5, Cost: tc.cost}},
			Contenders: []Contender{{Algorithm: "fixed_window"}},
		}
		res := run(t, sc)
		found := false
		for _, c := range Charts(res) {
			if strings.HasPrefix(c.Name, "count-") {
				found = true
				if c.Chart.YLabel != tc.want {
					t.Errorf("cost %d: count chart's axis %q, want %q", tc.cost, c.Chart.YLabel, tc.want)
				}
			}
		}
		if !found {
			t.Errorf("cost %d: no count chart", tc.cost)
		}
	}
}
