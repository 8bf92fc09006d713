package sim

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestContenderFieldWrittenAsZero: a contender field whose 0 means "the
// default" when left out (lease_size, lease_ttl, rtt, lag, hold,
// instances, a bucket's burst, sub_windows, warmup_period, cold_factor,
// max_burst_seconds) is refused when written as 0, naming the field and
// where: the --contender text, or the YAML line of the field. Left out, it
// keeps its default. lease_size=0 used to run leases of max(1, limit ÷ 10K).
func TestContenderFieldWrittenAsZero(t *testing.T) {
	for _, tc := range []struct{ spec, field, dflt string }{
		{"lease algorithm=gcra lease_size=0", "lease_size", "max(1, limit ÷ (10 × instances))"},
		{"lease lease_ttl=0", "lease_ttl", "period ÷ 10"},
		{"lease rtt=0", "rtt", "1ms"},
		{"central rtt=0s", "rtt", "1ms"},
		{"async lag=0", "lag", "1s"},
		{"local instances=0", "instances", "the scenario's instances"},
		{"concurrency hold=0", "hold", "period ÷ limit"},
		{"token_bucket burst=0", "burst", "a capacity of limit"},
		{"gcra burst=0", "burst", "a capacity of limit"},
		{"sliding_window sub_windows=0", "sub_windows", "1, the two-window estimate"},
		{"smooth_warmup warmup_period=0", "warmup_period", "one period"},
		{"smooth_warmup cold_factor=0", "cold_factor", "3"},
		{"smooth_bursty max_burst_seconds=0", "max_burst_seconds", "1"},
	} {
		want := `--contender #1 "` + tc.spec + `": ` + tc.field + ": must be > 0, got 0; leave " + tc.field + " out for the default, " + tc.dflt + "\n"
		code, _, stderr := mainRun(t, append([]string{"--traffic", "steady", "--rate", "10"}, append(base, "--contender", tc.spec)...)...)
		if code != 2 || !strings.HasSuffix(stderr, want) {
			t.Errorf("--contender %q: exit %d, stderr %q; want exit 2 and %q", tc.spec, code, stderr, want)
		}
	}

	// Written as 0 where it does not apply: refused as when not 0.
	for spec, want := range map[string]string{
		"local lease_size=0":                 "lease_size: lease_size and lease_ttl apply to the lease strategy only, not local",
		"local lease_ttl=0":                  "lease_ttl: lease_size and lease_ttl apply to the lease strategy only, not local",
		"lease algorithm=shaper lease_ttl=0": "lease_ttl: store/lease does not lease shaper",
		"single algorithm=gcra instances=0":  "instances: the single strategy decides every request on one limiter",
		"local rtt=0":                        "rtt: rtt applies to the central and lease strategies only, not local",
		"central lag=0":                      "lag: lag applies to the async strategy only, not central",
		"gcra hold=0":                        "hold: hold applies to the concurrency algorithm only, not gcra",
		"fixed_window sub_windows=0":         "sub_windows: applies to sliding_window only, not fixed_window",
		"gcra delay=0":                       "delay: applies to shaper only, not gcra",
		"fixed_window max_wait=0":            "max_wait: applies to smooth_bursty, smooth_warmup only, not fixed_window",
	} {
		code, _, stderr := mainRun(t, append([]string{"--traffic", "steady", "--rate", "10"}, append(base, "--contender", spec)...)...)
		if code != 2 || !strings.Contains(stderr, `--contender #1 "`+spec+`": `+want) {
			t.Errorf("--contender %q: exit %d, stderr %q; want exit 2 and %q", spec, code, stderr, want)
		}
	}

	// The YAML field: the error is at its line.
	yaml := "limit: 100\nperiod: 1s\nduration: 10s\ntraffic:\n  - {kind: steady, rate: 10}\ncontenders:\n  - strategy: lease\n    algorithm: gcra\n    lease_size: 0\n"
	_, err := ParseScenario("s.yaml", []byte(yaml))
	if want := "s.yaml:9: contenders[0].lease_size: must be > 0, got 0; leave lease_size out for the default, max(1, limit ÷ (10 × instances))"; !errors.Is(err, ErrScenario) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("lease_size: 0 in YAML: %v, want %q", err, want)
	}

	// Left out, or written with a meaningful 0, it runs with the default.
	yaml = "limit: 100\nperiod: 1s\nduration: 10s\ninstances: 5\ntraffic:\n  - {kind: steady, rate: 10}\ncontenders:\n  - {strategy: lease, algorithm: gcra}\n  - {algorithm: shaper, burst: 0, delay: 0}\n  - {algorithm: smooth_bursty, max_wait: 0}\n"
	sc, err := ParseScenario("s.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("defaults and meaningful 0s: %v", err)
	}
	if c := sc.Contenders[0]; c.LeaseSize != 2 || c.LeaseTTL != Duration(100e6) || c.RTT != Duration(1e6) {
		t.Errorf("lease without lease_size, lease_ttl, rtt: %d, %v, %v; want 2, 100ms, 1ms", c.LeaseSize, c.LeaseTTL.D(), c.RTT.D())
	}
	code, _, stderr := mainRun(t, append([]string{"--traffic", "steady", "--rate", "10"}, append(base, "--contender", "lease algorithm=gcra lease_size=3 lease_ttl=50ms", "--contender", "shaper burst=0")...)...)
	if code != 0 {
		t.Errorf("lease_size=3 lease_ttl=50ms, shaper burst=0: exit %d, stderr %q", code, stderr)
	}
}

// TestScenarioFieldWrittenAsZero: the scenario's and the sources' fields
// whose 0 means "the default" (duration of a replay, bin, instances; keys,
// cost, to, a diurnal cycle, a flash crowd's decay) are refused when the
// YAML writes them as 0, at their line, as their flags are; a report's
// scenario.yaml, which leaves them out when unset, still reruns.
func TestScenarioFieldWrittenAsZero(t *testing.T) {
	const head = "limit: 100\nperiod: 1s\n"
	for _, tc := range []struct{ yaml, want string }{
		{head + "duration: 0\ntraffic:\n  - {kind: replay, file: x.log}\n", "s.yaml:3: duration: must be > 0, got 0; leave duration out for a replay to run to its last request"},
		{head + "duration: 10s\nbin: 0s\ntraffic:\n  - {kind: steady, rate: 10}\n", "s.yaml:4: bin: must be > 0, got 0; leave bin out for the default, 1s (coarser for runs over an hour)"},
		{head + "duration: 10s\ninstances: 0\ntraffic:\n  - {kind: steady, rate: 10}\n", "s.yaml:4: instances: must be > 0, got 0; leave instances out for the default, 4"},
		{head + "duration: 10s\ntraffic:\n  - kind: steady\n    rate: 10\n    keys: 0\n", "s.yaml:7: traffic[0] (steady): keys: must be > 0, got 0; leave keys out for the default, 1"},
		{head + "duration: 10s\ntraffic:\n  - {kind: steady, rate: 10, cost: 0}\n", "s.yaml:5: traffic[0] (steady): cost: must be > 0, got 0; leave cost out for the default, 1"},
		{head + "duration: 10s\ntraffic:\n  - {kind: steady, rate: 10, to: 0s}\n", "s.yaml:5: traffic[0] (steady): to: must be > 0, got 0; leave to out for the source to send until the end of the run"},
		{head + "duration: 10s\ntraffic:\n  - {kind: diurnal, peak: 10, cycle: 0}\n", "s.yaml:5: traffic[0] (diurnal): cycle: must be > 0, got 0; leave cycle out for the default, the source's span"},
		{head + "duration: 10s\ntraffic:\n  - {kind: flash, peak: 10, rise: 1s, decay: 0}\n", "s.yaml:5: traffic[0] (flash): decay: must be > 0, got 0; leave decay out for the default, rise"},
	} {
		_, err := ParseScenario("s.yaml", []byte(tc.yaml))
		if !errors.Is(err, ErrScenario) || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.yaml, err, tc.want)
		}
	}
	// Meaningful 0s stay: the first key, the run's start, a crowd at 0.
	ok := head + "duration: 10s\nfocus_key: 0\ntraffic:\n  - {kind: flash, peak: 10, rate: 0, at: 0, rise: 0, hold: 2s, from: 0, key_offset: 0}\n"
	if _, err := ParseScenario("s.yaml", []byte(ok)); err != nil {
		t.Errorf("meaningful 0s: %v", err)
	}
	// A report's scenario.yaml reruns: it writes no unset field as 0.
	out := filepath.Join(t.TempDir(), "r")
	if code, _, stderr := mainRun(t, "--traffic", "flash", "--peak", "10", "--hold", "2s", "--limit", "5", "--period", "1s", "--duration", "5s", "--contender", "gcra", "--out", out); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if code, _, stderr := mainRun(t, "--scenario", filepath.Join(out, "scenario.yaml")); code != 0 {
		t.Errorf("rerun of scenario.yaml: exit %d: %s", code, stderr)
	}
}
