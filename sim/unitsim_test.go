package sim

import (
	"strings"
	"testing"
)

// A duration flag, an --scale time and a --contender duration setting
// need a unit, as serve's duration flags and the configuration's durations
// do: a bare number (read as seconds before, so --period 60 was a minute
// and lag=500 over 8 minutes) is refused with what to write. 0 needs no
// unit, and the scenario YAML still reads a bare number as seconds.
func TestDurationFlagsNeedAUnit(t *testing.T) {
	run := []string{"--limit", "5", "--duration", "2s", "--rate", "10", "--contender", "gcra"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--period", "60"}, "floodgate sim: --period 60: a duration needs a unit: 60s, 1m\n"},
		{[]string{"--period", "1s", "--bin", "0.5"}, "floodgate sim: --bin 0.5: a duration needs a unit: 0.5s, 500ms\n"},
		{[]string{"--period", "1s", "--duration", "90"}, "floodgate sim: --duration 90: a duration needs a unit: 90s, 1m30s\n"},
		{[]string{"--period", "1s", "--traffic", "bursts", "--on", "5"}, "floodgate sim: --on 5: a duration needs a unit: 5s\n"},
		{[]string{"--period", "1s", "--traffic", "bursts", "--on", "5s", "--off", "25"}, "floodgate sim: --off 25: a duration needs a unit: 25s\n"},
		{[]string{"--period", "1s", "--traffic", "diurnal", "--peak", "20", "--cycle", "2"}, "floodgate sim: --cycle 2: a duration needs a unit: 2s\n"},
		{[]string{"--period", "1s", "--traffic", "flash", "--peak", "20", "--at", "1"}, "floodgate sim: --at 1: a duration needs a unit: 1s\n"},
		{[]string{"--period", "1s", "--traffic", "flash", "--peak", "20", "--rise", "1"}, "floodgate sim: --rise 1: a duration needs a unit: 1s\n"},
		{[]string{"--period", "1s", "--traffic", "flash", "--peak", "20", "--hold", "1"}, "floodgate sim: --hold 1: a duration needs a unit: 1s\n"},
		{[]string{"--period", "1s", "--traffic", "flash", "--peak", "20", "--rise", "1s", "--decay", "1"}, "floodgate sim: --decay 1: a duration needs a unit: 1s\n"},
		{[]string{"--period", "soon"}, `floodgate sim: --period soon: bad duration "soon" (want e.g. 90s, 1m30s or 500ms)` + "\n"},
		{[]string{"--period", "1s", "--scale", "1:8"}, `invalid value "1:8" for flag -scale: AT 1: a duration needs a unit: 1s`},
		{[]string{"--period", "1s", "--contender", "async lag=500"}, `contender "async lag=500": lag=500: a duration needs a unit: 500s, 8m20s`},
		{[]string{"--period", "1s", "--contender", "lease rtt=0.002"}, `contender "lease rtt=0.002": rtt=0.002: a duration needs a unit: 0.002s, 2ms`},
		{[]string{"--period", "1s", "--contender", "concurrency hold=1"}, `contender "concurrency hold=1": hold=1: a duration needs a unit: 1s`},
	} {
		code, _, stderr := mainRun(t, append(append([]string{}, run...), tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("sim %q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	// With units, and 0 where 0 is allowed, the same flags run.
	for _, args := range [][]string{
		{"--period", "1s", "--bin", "500ms", "--scale", "1s:8", "--contender", "async lag=500ms"},
		{"--period", "1s", "--traffic", "bursts", "--on", "1s", "--off", "0"},
		{"--period", "1s", "--traffic", "flash", "--peak", "20", "--at", "0", "--rise", "0", "--hold", "1s"},
	} {
		if code, _, stderr := mainRun(t, append(append([]string{}, run...), args...)...); code != 0 {
			t.Errorf("sim %q: exit %d, stderr %q; want exit 0", args, code, stderr)
		}
	}
	// The scenario YAML reads a bare number as seconds, as documented.
	sc, err := ParseScenario("s.yaml", []byte("limit: 5\nperiod: 60\nduration: 90\ntraffic: [{kind: steady, rate: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Period.D().String() != "1m0s" || sc.Duration.D().String() != "1m30s" {
		t.Errorf("YAML period: 60, duration: 90 = %v, %v; want 1m0s, 1m30s", sc.Period.D(), sc.Duration.D())
	}
}
