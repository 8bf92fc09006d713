package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// store/lease does not lease the shaper or the Smooth algorithms (their
// admitted requests carry a delay): it hands each request to the shared
// store. The lease strategy does the same, so it decides exactly as central
// does, delay included, with one store call per decision.
func TestLeaseForwardsWhatStoreLeaseDoesNotLease(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		c                          Contender
		admitted, maxWin, latMax   int64
		over, storeCalls, requests int64
	}{
		{"shaper", Contender{Algorithm: "shaper", Burst: 20}, 1020, 100, 200_000, 0, 0, 10_000},
		{"central shaper", Contender{Strategy: StrategyCentral, Algorithm: "shaper", Burst: 20}, 1020, 100, 201_000, 0, 10_000, 10_000},
		{"lease shaper", Contender{Strategy: StrategyLease, Algorithm: "shaper", Burst: 20}, 1020, 100, 201_000, 0, 10_000, 10_000},
		{"lease smooth_bursty", Contender{Strategy: StrategyLease, Algorithm: "smooth_bursty", MaxWait: Duration(500 * time.Millisecond)}, 1050, 100, 501_000, 0, 10_000, 10_000},
	} {
		sc := &Scenario{
			Duration: sec(10), Limit: 100, Period: sec(1), Instances: 1,
			Traffic:    []Source{{Kind: SourceSteady, Rate: 1000}},
			Contenders: []Contender{tc.c},
		}
		m := run(t, sc).Contenders[0].Metrics
		if m.AdmittedUnits != tc.admitted || m.MaxWindow != tc.maxWin || m.LatencyMax != tc.latMax || m.Over != tc.over || m.StoreCalls != tc.storeCalls || m.Requests != tc.requests {
			t.Errorf("%s: admitted %d, max in a window %d, latency max %dµs, over %d, store calls %d of %d; want %d, %d, %dµs, %d, %d of %d",
				tc.name, m.AdmittedUnits, m.MaxWindow, m.LatencyMax, m.Over, m.StoreCalls, m.Requests,
				tc.admitted, tc.maxWin, tc.latMax, tc.over, tc.storeCalls, tc.requests)
		}
	}
}

// N instances that each enforce the whole limit (local share=full) admit
// up to K times the limit for a key spread over them by round robin; the
// split share admits the limit.
func TestLocalShareFullAdmitsKTimesTheLimit(t *testing.T) {
	for _, tc := range []struct {
		share          string
		maxWin, excess int64
	}{
		{ShareFull, 400, 1500},
		{ShareSplit, 100, 0},
		{"", 100, 0},
	} {
		sc := &Scenario{
			Duration: sec(5), Limit: 100, Period: sec(1), Instances: 4,
			Traffic:    []Source{{Kind: SourceSteady, Rate: 1000}},
			Contenders: []Contender{{Strategy: StrategyLocal, Share: tc.share}},
		}
		m := run(t, sc).Contenders[0].Metrics
		if m.MaxWindow != tc.maxWin || m.ExcessUnits != tc.excess {
			t.Errorf("local share %q, K=4, round robin: max in a window %d, excess units %d; want %d, %d", tc.share, m.MaxWindow, m.ExcessUnits, tc.maxWin, tc.excess)
		}
	}
}

// A setting the contender's strategy or algorithm would ignore is an
// error that says so, not silently overwritten.
func TestIgnoredContenderSettingsAreErrors(t *testing.T) {
	for _, tc := range []struct{ contender, want string }{
		{"sticky balancer=random", `contenders[0].balancer: the sticky strategy always balances by key (balancer sticky), so balancer random would be ignored; for instances that each enforce the whole limit behind a random balancer, use "local share=full balancer=random"`},
		{"gcra balancer=random", "contenders[0].balancer: the single strategy decides every request on one limiter"},
		{"central instances=3", "contenders[0].instances: the central strategy decides every request on one limiter"},
		{"sticky weights=1,2", "contenders[0].weights: the sticky strategy balances by key, so weights do not apply"},
		{"local balancer=random weights=1,2", "contenders[0].weights: weights apply to the weighted balancer only, not random"},
		{"async share=full", "contenders[0].share: share applies to the local strategy only, not async"},
		{"local share=half", `contenders[0].share: want split (each instance enforces limit ÷ K) or full (each enforces the whole limit), got "half"`},
		{"local rtt=2ms", "contenders[0].rtt: rtt applies to the central and lease strategies only, not local"},
		{"central lag=1s", "contenders[0].lag: lag applies to the async strategy only, not central"},
		{"async lag=-1s", "contenders[0].lag: must not be negative"},
		{"lease lease_ttl=-1s", "contenders[0].lease_ttl: must not be negative"},
		{"sticky lease_size=5", "contenders[0].lease_size: lease_size and lease_ttl apply to the lease strategy only, not sticky"},
		{"lease algorithm=shaper lease_size=1", "contenders[0].lease_size: store/lease does not lease shaper (its admitted requests carry a delay that depends on when they arrive): every request goes to the store"},
		{"gcra hold=1s", "contenders[0].hold: hold applies to the concurrency algorithm only, not gcra"},
	} {
		c, err := ParseContender(tc.contender)
		if err != nil {
			t.Errorf("ParseContender(%q): %v", tc.contender, err)
			continue
		}
		sc := &Scenario{Limit: 10, Period: sec(1), Duration: sec(1), Traffic: []Source{{Kind: SourceSteady, Rate: 1}}, Contenders: []Contender{c}}
		if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.contender, err, tc.want)
		}
	}
}

// Steady traffic at rate r over d seconds is exactly r·d requests: arrival
// i is at i/r, not at a sum of rounded gaps.
func TestSteadyTrafficCountsExactly(t *testing.T) {
	for _, tc := range []struct {
		rate Rate
		from Duration
		dur  Duration
		want int64
	}{
		{10, 0, sec(60), 600},
		{20, 0, sec(60), 1200},
		{3, 0, sec(60), 180},
		{7, 0, sec(60), 420},
		{100.0 / 60, 0, sec(60), 100},
		{1000, 0, sec(60), 60_000},
		{10, sec(0.05), sec(60), 600},
	} {
		sc := &Scenario{
			Duration: tc.dur, Limit: 100000, Period: sec(1),
			Traffic:    []Source{{Kind: SourceSteady, Rate: tc.rate, From: tc.from}},
			Contenders: []Contender{{Algorithm: "fixed_window"}},
		}
		if got := run(t, sc).Offered.Metrics.Requests; got != tc.want {
			t.Errorf("steady %v/s from %v for %v: %d requests, want %d", float64(tc.rate), tc.from.D(), tc.dur.D(), got, tc.want)
		}
	}
}

// --contender takes weights as a comma list, as YAML's flow form.
func TestParseContenderWeights(t *testing.T) {
	for in, want := range map[string][]int{
		"local balancer=weighted weights=1,1,1,5": {1, 1, 1, 5},
		"local weights=[4,1]":                     {4, 1},
		"lease weights=3":                         {3},
	} {
		c, err := ParseContender(in)
		if err != nil || !slices.Equal(c.Weights, want) {
			t.Errorf("ParseContender(%q) = weights %v, %v; want %v", in, c.Weights, err, want)
		}
	}
}

// Automatic names carry the load balancer, and a name that still collides
// is numbered; a collision with a name the user gave says how to fix it.
func TestAutomaticNamesDoNotCollide(t *testing.T) {
	names := func(cs ...string) ([]string, error) {
		sc := &Scenario{Limit: 10, Period: sec(1), Duration: sec(1), Traffic: []Source{{Kind: SourceSteady, Rate: 1}}}
		for _, s := range cs {
			c, err := ParseContender(s)
			if err != nil {
				return nil, err
			}
			sc.Contenders = append(sc.Contenders, c)
		}
		if err := sc.Validate(); err != nil {
			return nil, err
		}
		var out []string
		for _, c := range sc.Contenders {
			out = append(out, c.Name)
		}
		return out, nil
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"local", "local balancer=random"}, "local sliding_log ÷4|local sliding_log ÷4 random"},
		{[]string{"local", "local balancer=weighted weights=3,1"}, "local sliding_log ÷4|local sliding_log ÷4 weighted 3:1"},
		{[]string{"local", "local share=full"}, "local sliding_log ÷4|local sliding_log full K=4"},
		{[]string{"lease", "lease rtt=5ms", "lease rtt=9ms"}, "lease sliding_log 1/lease|lease sliding_log 1/lease #2|lease sliding_log 1/lease #3"},
		{[]string{"lease algorithm=shaper"}, "lease shaper forwarded"},
	} {
		got, err := names(tc.in...)
		if err != nil || strings.Join(got, "|") != tc.want {
			t.Errorf("names of %q = %q, %v; want %q", tc.in, strings.Join(got, "|"), err, tc.want)
		}
	}
	_, err := names("gcra name=a", "fixed_window name=a")
	if want := `contenders[1].name: "a" is already contenders[0]; give one of them another name (name: in YAML, name= in --contender)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("duplicate given names: %v, want %q", err, want)
	}
}

// A report's scenario.yaml holds the contenders as written, so a rerun
// with other flags names and sizes them afresh instead of keeping stale
// defaults.
func TestScenarioYAMLKeepsContendersAsWritten(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--traffic", "steady", "--rate", "50", "--limit", "10", "--period", "1s", "--duration", "3s", "--progress", "never",
		"--contender", "local", "--contender", "lease", "--out", dir}
	if code := MainContext(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	stdout.Reset()
	if code := MainContext(context.Background(), []string{"--scenario", filepath.Join(dir, "scenario.yaml"), "--instances", "2", "--progress", "never"}, &stdout, &stderr); code != 0 {
		t.Fatalf("rerun: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"local sliding_log ÷2", "lease sliding_log 1/lease"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("rerun with --instances 2 lacks %q:\n%s", want, stdout.String())
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "contenders:\n    - strategy: local\n    - strategy: lease\n"; !strings.Contains(string(data), want) {
		t.Errorf("scenario.yaml:\n%s\nwant it to hold %q", data, want)
	}
}

// The window charts follow the key each contender took furthest over the
// limit and name it, with the scale events marked; without the option (or
// when a contender never exceeds the limit) they follow the focus key.
func TestWindowChartsFollowTheWorstKey(t *testing.T) {
	load := func() *Scenario {
		sc, err := LoadScenario("distributed")
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	res := run(t, load(), WithWorstKeyWindows())
	want := map[string]string{
		"window-01-central-sliding-log-rtt-1ms": "central sliding_log rtt 1ms: key 0, admitted in the last 1s",
		"window-03-sticky-sliding-log-k-4":      "sticky sliding_log K=4: key 14, admitted in the last 1s",
		"window-04-async-sliding-log-lag-250ms": "async sliding_log lag 250ms: key 19, admitted in the last 1s",
		"window-05-lease-sliding-log-10-lease":  "lease sliding_log 10/lease: key 5, admitted in the last 1s",
		"window-02-local-sliding-log-4-random":  "local sliding_log ÷4 random: key 0, admitted in the last 1s",
	}
	for _, c := range Charts(res) {
		w, ok := want[c.Name]
		if !ok {
			continue
		}
		delete(want, c.Name)
		if c.Chart.Title != w || len(c.Chart.VRules) != 1 {
			t.Errorf("%s: title %q with %d event rules; want %q and 1", c.Name, c.Chart.Title, len(c.Chart.VRules), w)
		}
	}
	if len(want) > 0 {
		t.Errorf("charts missing: %v", want)
	}
	// The sticky contender's worst key reaches 155 in its window, as the
	// table's max in a window says; the ideal's never passes the limit.
	st := res.Contenders[2]
	if st.Worst == nil || st.Worst.Key != 14 || maxOf(st.Worst.Window) != 140 || maxOf(st.Worst.Ideal) != 100 || st.Metrics.MaxWindow != 155 {
		t.Fatalf("sticky worst key = %+v, max window %d", st.Worst, st.Metrics.MaxWindow)
	}
	if plain := run(t, load()); plain.Contenders[2].Worst != nil {
		t.Errorf("without WithWorstKeyWindows, Worst = %+v, want nil", plain.Contenders[2].Worst)
	}
}

func maxOf(v []int64) int64 {
	var m int64
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// The table counts wrong decisions and, beside them, the error in units:
// a shaper under overload refuses many requests that would have fitted but
// admits as many units as the ideal, key by key.
func TestTableReportsUnitsBesideDecisions(t *testing.T) {
	sc := &Scenario{
		Duration: sec(10), Limit: 100, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 1000}},
		Contenders: []Contender{{Algorithm: "smooth_bursty"}, {Algorithm: "fixed_window"}},
	}
	res := run(t, sc)
	sm, fw := res.Contenders[0].Metrics, res.Contenders[1].Metrics
	if sm.AdmittedUnits != 1000 || sm.Under != 891 || sm.ExcessUnits != 0 || sm.MissingUnits != 0 {
		t.Errorf("smooth_bursty: admitted %d, under %d, excess %d, missing %d; want 1000, 891, 0, 0", sm.AdmittedUnits, sm.Under, sm.ExcessUnits, sm.MissingUnits)
	}
	if fw.ExcessUnits != 0 || fw.MissingUnits != 0 {
		t.Errorf("fixed_window on steady traffic: excess %d, missing %d; want 0, 0", fw.ExcessUnits, fw.MissingUnits)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"per-key units +/− ideal", "under-admitted reqs", "wrong decisions", "+0.0% / −0.0%", "891 (8.9%)", "counted in decisions"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
