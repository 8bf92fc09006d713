package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/algo"
)

// mainRun runs `floodgate sim ARGS --progress never` and returns the exit
// code, stdout and stderr.
func mainRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := MainContext(context.Background(), append(args, "--progress", "never"), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// base is a run without traffic flags: the limit and the duration.
var base = []string{"--limit", "100", "--period", "1s", "--duration", "30s"}

// Every traffic shape can be set fully from flags (--cycle, --decay), and
// a shape that lacks what it needs, or a crowd outside the run, is refused
// with what to give, from flags (naming the flags) and from YAML (naming
// the fields): nothing falls back silently to a rate of 0 or a crowd that
// lasts no time.
func TestTrafficShapesNeedWhatTheyUse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// The reviewer's flash crowd: no rise, hold or decay.
		{[]string{"--rate", "50", "--traffic", "flash", "--peak", "500", "--at", "10s"}, "floodgate sim: --rise, --hold or --decay is required (--traffic flash: without them the crowd would last no time), e.g. --rise 2s --hold 5s\n"},
		{[]string{"--rate", "50", "--traffic", "flash", "--peak", "500", "--at", "10s", "--rise", "0"}, "floodgate sim: --rise/--hold/--decay: all 0, so the crowd would last no time; set at least one, e.g. --rise 2s --hold 5s\n"},
		{[]string{"--rate", "50", "--traffic", "flash", "--peak", "500", "--at", "40s", "--rise", "2s"}, "floodgate sim: --at: 40s is not before the end of the run (--duration 30s): the crowd would never come\n"},
		{[]string{"--rate", "50", "--traffic", "flash", "--peak", "500", "--at", "30s", "--rise", "2s"}, "--at: 30s is not before the end of the run"},
		{[]string{"--rate", "50", "--traffic", "diurnal"}, "floodgate sim: --peak is required (--traffic diurnal: the rate swings between --rate (default 0) and --peak, e.g. --rate 50 --peak 150)\n"},
		{[]string{"--rate", "50", "--traffic", "ramp"}, "floodgate sim: --peak is required (--traffic ramp: the rate moves from --rate (default 0) to --peak"},
		{[]string{"--rate", "50", "--traffic", "flash", "--rise", "1s"}, "floodgate sim: --peak is required (--traffic flash"},
		{[]string{"--rate", "50", "--traffic", "ramp", "--peak", "0"}, "floodgate sim: --peak: required, > 0: the rate moves from rate to peak"},
		{[]string{"--rate", "50", "--traffic", "bursts"}, "floodgate sim: --on is required (--traffic bursts: the length of a burst"},
		{[]string{"--rate", "50", "--traffic", "ramp", "--peak", "90", "--cycle", "3s"}, "floodgate sim: --cycle applies to --traffic diurnal only, not ramp\n"},
		{[]string{"--rate", "50", "--traffic", "diurnal", "--peak", "90", "--decay", "3s"}, "floodgate sim: --decay applies to --traffic flash only, not diurnal\n"},
		{[]string{"--rate", "50", "--traffic", "diurnal", "--peak", "90", "--cycle", "0"}, "floodgate sim: --cycle: must be > 0 (without --cycle the swing takes the whole run)\n"},
		{[]string{"--rate", "50", "--traffic", "flash", "--peak", "90", "--decay", "0"}, "floodgate sim: --decay: must be > 0 (without --decay the crowd decays over --rise)\n"},
		{[]string{"--traffic", "replay"}, "floodgate sim: --traffic replay: give the log with --replay FILE instead\n"},
		{[]string{"--traffic", "gaussian"}, `floodgate sim: --traffic: unknown "gaussian" (want one of steady, poisson, bursts, diurnal, ramp, flash; or --replay FILE)`},
	} {
		code, _, stderr := mainRun(t, append(append([]string{}, base...), tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("sim %q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}

	// The same checks on a scenario file, naming the fields.
	head := "limit: 100\nperiod: 1s\nduration: 30s\ntraffic:\n"
	for _, tc := range []struct{ yaml, want string }{
		{head + "  - {kind: flash, rate: 50, peak: 500, at: 10s}\n", "s.yaml:5: traffic[0] (flash): rise/hold/decay: all 0, so the crowd would last no time; set at least one, e.g. rise: 2s, hold: 5s"},
		{head + "  - {kind: flash, rate: 50, peak: 500, at: 40s, rise: 2s}\n", "s.yaml:5: traffic[0] (flash): at: 40s is not before the end of the run (duration 30s): the crowd would never come"},
		{head + "  - {kind: flash, rate: 50, peak: 500, at: 15s, rise: 2s, to: 10s}\n", "s.yaml:5: traffic[0] (flash): at: 15s is not before the source's end (to: 10s)"},
		{head + "  - {kind: diurnal, rate: 50}\n", "s.yaml:5: traffic[0] (diurnal): peak: required, > 0: the rate swings between rate and peak (rate defaults to 0; for a constant rate use poisson or steady)"},
		{head + "  - {kind: ramp, rate: 50}\n", "s.yaml:5: traffic[0] (ramp): peak: required, > 0: the rate moves from rate to peak"},
		{head + "  - {kind: poisson, rate: 50, cycle: 10s}\n", "s.yaml:5: traffic[0] (poisson): cycle: applies to diurnal traffic only, not poisson"},
		{head + "  - {kind: ramp, rate: 50, peak: 60, decay: 1s}\n", "s.yaml:5: traffic[0] (ramp): decay: applies to flash traffic only, not ramp"},
		{head + "  - {kind: poisson, rate: 50, peak: 60}\n", "s.yaml:5: traffic[0] (poisson): peak: applies to diurnal, ramp, flash traffic only, not poisson"},
	} {
		_, err := ParseScenario("s.yaml", []byte(tc.yaml))
		if err == nil || !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("scenario %q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}

	// --cycle and --decay reach the scenario (its report's copy says so),
	// and a flash crowd given its shape from flags offers more than the
	// same run without one.
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--traffic", "diurnal", "--rate", "50", "--peak", "150", "--cycle", "10s"},
		{"--traffic", "flash", "--rate", "50", "--peak", "500", "--at", "10s", "--rise", "2s", "--hold", "5s", "--decay", "3s"},
	} {
		out := filepath.Join(dir, args[1])
		code, _, stderr := mainRun(t, append(append(append([]string{}, base...), args...), "--out", out, "--contender", "gcra")...)
		if code != 0 {
			t.Fatalf("sim %q: exit %d: %s", args, code, stderr)
		}
		data, err := os.ReadFile(filepath.Join(out, "scenario.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"diurnal": "cycle: 10s", "flash": "decay: 3s"}[args[1]]
		if !strings.Contains(string(data), want) {
			t.Errorf("sim %q: scenario.yaml lacks %q:\n%s", args, want, data)
		}
	}
	offered := func(args ...string) int64 {
		code, stdout, stderr := mainRun(t, append(append(append([]string{}, base...), args...), "--contender", "gcra")...)
		if code != 0 {
			t.Fatalf("sim %q: exit %d: %s", args, code, stderr)
		}
		var n int64
		for _, line := range strings.Split(stdout, "\n") {
			if _, err := fmt.Sscanf(line, "offered: %d requests", &n); err == nil {
				return n
			}
		}
		t.Fatalf("sim %q: no offered line in %s", args, stdout)
		return 0
	}
	flat := offered("--rate", "50")
	crowd := offered("--rate", "50", "--traffic", "flash", "--peak", "500", "--at", "10s", "--rise", "2s", "--hold", "5s")
	// 450 more a second for 5 s at the peak, half that over the rise and
	// the decay (2 s each): about 3,600 more than 1,500.
	if crowd < flat+3000 {
		t.Errorf("a flash crowd to 500/s for 5s offered %d requests, without one %d: want about 3600 more", crowd, flat)
	}
}

// Without --scenario, the errors name the flags to give (all of those
// missing at once), not YAML paths the user never wrote.
func TestFlagErrorsNameFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--limit", "100", "--period", "1m"}, "floodgate sim: --duration is required (how much time to simulate, e.g. --duration 10m); --rate is required (the default traffic is poisson; e.g. --rate 100 (per second) or --rate 6000/m)\n"},
		{[]string{"--limit", "100", "--period", "1m", "--rate", "5"}, "floodgate sim: --duration is required (how much time to simulate, e.g. --duration 10m)\n"},
		{[]string{"--traffic", "steady", "--limit", "100", "--period", "1m", "--duration", "1m"}, "floodgate sim: --rate is required (--traffic steady; e.g. --rate 100"},
		{[]string{"--limit", "100", "--period", "1m", "--duration", "1m", "--rate", "0"}, "floodgate sim: --rate: must be > 0\n"},
		{[]string{"--limit", "100", "--period", "1m", "--duration", "1m", "--rate", "2e7"}, "floodgate sim: --rate: at most 1e+07 per second\n"},
		{[]string{"--limit", "100", "--period", "1m", "--duration", "1m", "--rate", "1", "--zipf", "0.5"}, "floodgate sim: --zipf: must be 0 (uniform) or between 1 and 100 exclusive, got 0.5\n"},
		{[]string{"--limit", "100", "--period", "1us", "--duration", "1m", "--rate", "1"}, "floodgate sim: --period: must be at least 1ms, got 1µs\n"},
		{[]string{"--limit", "100", "--period", "0s", "--duration", "1m", "--rate", "1"}, "floodgate sim: --period: must be > 0 (the limit needs a window)\n"},
		{[]string{"--limit", "100", "--period", "1m", "--duration", "0", "--rate", "1"}, "floodgate sim: --duration: must be > 0 (without --duration a replay runs to its last request)\n"},
		{[]string{"--limit", "100", "--period", "1m", "--duration", "1m", "--rate", "1", "--bin", "1us"}, "floodgate sim: --bin: must be at least 1ms, got 1µs\n"},
		{[]string{"--limit", "100", "--period", "1m", "--duration", "1m", "--rate", "1", "--scale", "2m:8"}, `floodgate sim: --scale #1 "2m:8": at: 2m0s is outside the run` + "\n"},
		{[]string{"--limit", "1048577", "--period", "1m", "--duration", "1m", "--rate", "1"}, "floodgate sim: --limit: the perfect sliding window (sliding_log) cannot hold it"},
		// algo's "use sliding_window" is no way out for the ideal: say what is.
		{[]string{"--limit", "2000000", "--period", "1m", "--duration", "1m", "--rate", "1"}, "use sliding_window; the ideal is always the sliding log: to study a larger limit, divide the limit, the rates and the costs by the same factor\n"},
		{[]string{"--replay", "/nonexistent/access.log", "--limit", "10", "--period", "1s"}, "floodgate sim: --replay: open /nonexistent/access.log: no such file or directory\n"},
	} {
		code, _, stderr := mainRun(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("sim %q: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "traffic[") || strings.Contains(stderr, "bad scenario") {
			t.Errorf("sim %q: stderr %q names the YAML, not the flags", tc.args, stderr)
		}
	}
}

// -h says what a run from flags needs and what each flag defaults to.
func TestUsageSaysWhatIsRequiredAndTheDefaults(t *testing.T) {
	code, _, stderr := mainRun(t, "-h")
	if code != 0 {
		t.Fatalf("sim -h: exit %d", code)
	}
	for _, want := range []string{
		"Without --scenario, --limit and --period are required, and so is --duration\nunless --replay gives the requests",
		"The traffic (default poisson) needs:",
		"flash             --peak and one of --rise, --hold, --decay",
		"traffic kind: steady, poisson, bursts, diurnal, ramp, flash (default poisson)",
		"number of clients (keys) (default 1)",
		"(default 1s, or duration/3600 rounded up to a second for runs over an hour",
		"-cycle string",
		"-decay string",
		"Exit status: 0 on success, 2 for a mistake in the flags or the scenario",
		"instances past the weights given weigh 1",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("sim -h lacks %q:\n%s", want, stderr)
		}
	}
	// --bin 0 is refused rather than taken for the default, and so is a
	// negative one.
	for _, bin := range []string{"0s", "-1s"} {
		code, _, stderr := mainRun(t, "--limit", "5", "--period", "1s", "--duration", "5s", "--rate", "1", "--bin", bin)
		if code != 2 || !strings.Contains(stderr, "floodgate sim: --bin: must") {
			t.Errorf("--bin %s: exit %d, stderr %q; want exit 2 and a --bin error", bin, code, stderr)
		}
	}
}

// A --contender is named by its place among the flags and its text, not
// by a 0-based YAML index; smooth_warmup alone gets the default set's
// warm-up of one period.
func TestContenderFlags(t *testing.T) {
	args := append([]string{}, base...)
	args = append(args, "--rate", "5")
	for range 10 {
		args = append(args, "--contender", "gcra")
	}
	args = append(args, "--contender", "local lag=1s")
	code, _, stderr := mainRun(t, args...)
	if want := "floodgate sim: --contender #11 \"local lag=1s\": lag: lag applies to the async strategy only, not local\n"; code != 2 || stderr != want {
		t.Errorf("11th --contender wrong: exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
	}
	code, _, stderr = mainRun(t, append(append([]string{}, base...), "--rate", "5", "--contender", "gcra", "--contender", "fixed_window name=gcra")...)
	if want := "floodgate sim: --contender #2 \"fixed_window name=gcra\": name: \"gcra\" is already --contender #1 \"gcra\"; give one of them another name"; code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("duplicate name: exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
	}

	code, stdout, stderr := mainRun(t, append(append([]string{}, base...), "--rate", "5", "--contender", "smooth_warmup")...)
	if code != 0 || !strings.Contains(stdout, "\n  smooth_warmup") {
		t.Errorf("--contender smooth_warmup: exit %d, stderr %q; want it to run", code, stderr)
	}
	sc := &Scenario{Limit: 10, Period: sec(2), Duration: sec(5), Traffic: []Source{{Kind: SourcePoisson, Rate: 1}}, Contenders: []Contender{{Algorithm: "smooth_warmup"}}}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	if c := sc.Contenders[0]; c.kind != algo.SmoothWarmup || c.WarmupPeriod != sec(2) {
		t.Errorf("smooth_warmup without warmup_period warms up over %v, want one period (2s)", c.WarmupPeriod.D())
	}
}

// A duration shorter than a replayed log says how many of its requests it
// leaves out; without one, the run lasts to the last request rounded up to
// a second, not a microsecond past it.
func TestReplayPastTheDuration(t *testing.T) {
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, []byte("5 alice\n6 bob\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := mainRun(t, "--replay", log, "--limit", "10", "--period", "1s", "--duration", "3s", "--contender", "gcra")
	if want := "floodgate sim: warning: 2 replayed requests at or after the end of the run (3s) not simulated; a longer --duration, or none (up to the last request), replays them\n"; code != 0 || !strings.Contains(stderr, want) {
		t.Errorf("--duration 3s over a 6s log: exit %d, stderr %q; want exit 0 and %q", code, stderr, want)
	}
	if !strings.Contains(stdout, "offered: 0 requests") {
		t.Errorf("--duration 3s over a 6s log: %s", stdout)
	}
	code, _, stderr = mainRun(t, "--replay", log, "--limit", "10", "--period", "1s", "--duration", "6s", "--contender", "gcra")
	if code != 0 || !strings.Contains(stderr, "warning: 1 replayed request at or after the end of the run (6s)") {
		t.Errorf("--duration 6s over a 6s log: exit %d, stderr %q; want a warning about 1 request", code, stderr)
	}
	code, stdout, stderr = mainRun(t, "--replay", log, "--limit", "10", "--period", "1s", "--contender", "gcra")
	if code != 0 || !strings.HasPrefix(stdout, "scenario flags: 7s simulated") || !strings.Contains(stdout, "offered: 2 requests") || strings.Contains(stderr, "warning") {
		t.Errorf("no --duration: exit %d, stdout %q, stderr %q; want 7s simulated and both requests", code, stdout, stderr)
	}
}

// A report's scenario.yaml names a replayed log by its absolute path, so
// that it reruns from another directory to the same table.
func TestReportScenarioReplaysFromAnyDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "access.log"), []byte("0 alice\n0.2 bob 2\n0.4 alice\n1.5 alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	code, first, stderr := mainRun(t, "--replay", "access.log", "--limit", "2", "--period", "1s", "--contender", "fixed_window", "--out", "r5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	t.Chdir(t.TempDir())
	code, again, stderr := mainRun(t, "--scenario", filepath.Join(dir, "r5", "scenario.yaml"))
	if code != 0 {
		t.Fatalf("rerun of r5/scenario.yaml from another directory: exit %d: %s", code, stderr)
	}
	if again != first {
		t.Errorf("the rerun printed\n%s\nwant\n%s", again, first)
	}
	data, err := os.ReadFile(filepath.Join(dir, "r5", "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "file: " + filepath.Join(dir, "access.log"); !strings.Contains(string(data), want) {
		t.Errorf("scenario.yaml lacks %q:\n%s", want, data)
	}
}
