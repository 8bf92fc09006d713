package sim

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
)

var update = flag.Bool("update", false, "rewrite the golden CSVs in testdata/")

// The two golden scenarios give the committed CSVs byte for byte; run with
// -update after a deliberate change and review the diff.
func TestGoldenCSV(t *testing.T) {
	for _, name := range []string{"golden-algorithms", "golden-distributed"} {
		t.Run(name, func(t *testing.T) {
			sc, err := LoadScenario(filepath.Join("testdata", name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			res := run(t, sc, withChunk(7))
			var got bytes.Buffer
			if err := WriteCSV(&got, res); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", name+".csv")
			if *update {
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGoldenCSV -update to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("%s differs at line %d:\n got  %s\n want %s", path, i+1, gl[i], wl[i])
					}
				}
				t.Fatalf("%s: got %d lines, want %d", path, len(gl), len(wl))
			}
		})
	}
}

// The same seed gives byte-identical tables, CSVs and charts, whatever the
// hand-over chunk size; another seed gives other traffic.
func TestSameSeedSameBytes(t *testing.T) {
	render := func(seed uint64, chunk int) []byte {
		sc, err := LoadScenario("distributed")
		if err != nil {
			t.Fatal(err)
		}
		sc.Seed = seed
		sc.Duration = sec(12)
		res := run(t, sc, withChunk(chunk))
		var b bytes.Buffer
		if err := WriteTable(&b, res); err != nil {
			t.Fatal(err)
		}
		if err := WriteCSV(&b, res); err != nil {
			t.Fatal(err)
		}
		for _, c := range Charts(res) {
			if err := c.Chart.SVG(&b); err != nil {
				t.Fatal(err)
			}
		}
		if err := Charts(res)[0].Chart.PNG(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := render(3, 8192), render(3, 100)
	if !bytes.Equal(a, b) {
		t.Errorf("seed 3 gave different output with different chunk sizes")
	}
	if c := render(4, 8192); bytes.Equal(a, c) {
		t.Errorf("seeds 3 and 4 gave the same output")
	}
}

func TestScenarioErrorsSayWhatAndWhere(t *testing.T) {
	base := "limit: 5\nperiod: 1s\nduration: 3s\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown top field", base + "traffic: [{kind: poisson, rate: 1}]\nlimt: 3\n", "s.yaml:5: field limt not found"},
		{"unknown source field", base + "traffic:\n  - kind: poisson\n    rat: 3\n", `s.yaml:6: unknown field "rat" in traffic source`},
		{"unknown kind", base + "traffic:\n  - kind: gaussian\n", `s.yaml:5: traffic[0].kind: unknown "gaussian"`},
		{"bad rate", base + "traffic:\n  - kind: poisson\n    rate: fast\n", `s.yaml:6: bad rate "fast"`},
		{"zero rate", base + "traffic:\n  - kind: poisson\n", "s.yaml:5: traffic[0] (poisson): rate: must be > 0"},
		{"bad duration", "limit: 5\nperiod: soon\n", `s.yaml:2: bad duration "soon"`},
		{"no limit", "period: 1s\nduration: 3s\ntraffic: [{kind: poisson, rate: 1}]\n", "limit: must be > 0"},
		{"no traffic", base, "traffic: at least one source"},
		{"bad algorithm", base + "traffic: [{kind: poisson, rate: 1}]\ncontenders:\n  - algorithm: magic\n", `s.yaml:6: contenders[0].algorithm: invalid limit: unknown algorithm "magic"`},
		{"single without algorithm", base + "traffic: [{kind: poisson, rate: 1}]\ncontenders:\n  - strategy: single\n", `s.yaml:6: contenders[0].algorithm: required: the single strategy runs one algorithm, e.g. "single algorithm=gcra"`},
		{"bad strategy", base + "traffic: [{kind: poisson, rate: 1}]\ncontenders:\n  - strategy: gossip\n", `s.yaml:6: contenders[0].strategy: unknown "gossip"`},
		{"bad sub windows", base + "traffic: [{kind: poisson, rate: 1}]\ncontenders:\n  - algorithm: sliding_window\n    sub_windows: 7\n", "s.yaml:6: contenders[0].algorithm: invalid limit: sub_windows"},
		{"event outside", base + "traffic: [{kind: poisson, rate: 1}]\nevents:\n  - at: 10s\n    instances: 3\n", "s.yaml:6: events[0].at: 10s is outside the run"},
		{"duplicate names", base + "traffic: [{kind: poisson, rate: 1}]\ncontenders:\n  - algorithm: gcra\n  - algorithm: fixed_window\n    name: gcra\n", `s.yaml:7: contenders[1].name: "gcra" is already contenders[0]; give one of them another name (name: in YAML, name= in --contender)`},
		{"not yaml", "limit: [\n", "s.yaml:"},
		{"empty", "", "s.yaml: empty scenario"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario("s.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to wrap ErrScenario and contain %q", err, tc.want)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	sc := &Scenario{
		Limit: 3, Period: sec(1),
		Traffic:    []Source{{Kind: SourceReplay, File: filepath.Join("testdata", "replay.log")}},
		Contenders: []Contender{{Algorithm: "fixed_window"}},
	}
	res := run(t, sc)
	if sc.Duration.D() != 3*time.Second {
		t.Errorf("duration from the replay = %v, want the last line's 2.999s rounded up to a second", sc.Duration.D())
	}
	off := res.Offered.Metrics
	if off.Requests != 7 || off.Units != 10 || res.Keys != 3 {
		t.Errorf("replayed %d requests, %d units, %d keys; want 7, 10, 3", off.Requests, off.Units, res.Keys)
	}
	// alice: 1 + 3 = 4 units in the first second: the 3-unit one is refused.
	if m := res.Contenders[0].Metrics; m.Admitted != 6 {
		t.Errorf("fixed window admitted %d requests, want 6", m.Admitted)
	}
}

func TestReadReplayErrors(t *testing.T) {
	for _, tc := range []struct{ log, want string }{
		{"1.0 a\n0.5 a\n", "log:2: time goes backwards"},
		{"1.0\n", `log:1: want "time key [cost]"`},
		{"x a\n", `log:1: time "x" is neither seconds nor RFC 3339`},
		{"# c\n\n1 a 0\n", `log:3: cost "0" must be an integer`},
		{"-1 a\n", "log:1: time \"-1\" must be between"},
		{"2024-01-01T00:00:01Z a\n2024-01-01T00:00:00Z a\n", "log:2: time \"2024-01-01T00:00:00Z\" is before the first line"},
	} {
		_, _, err := readReplay("log", strings.NewReader(tc.log), 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("readReplay(%q) = %v, want %q", tc.log, err, tc.want)
		}
	}
	arr, names, err := readReplay("log", strings.NewReader("2024-01-01T00:00:00Z a\n2024-01-01T00:00:00.5Z b 4\n"), 10)
	if err != nil || len(arr) != 2 || arr[1].t != 500000 || arr[1].key != 11 || arr[1].cost != 4 || names[1] != "b" {
		t.Errorf("RFC 3339 replay = %v %v %v", arr, names, err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{"100": 100, "100/s": 100, "6000/m": 100, "7200/h": 2, "5/500ms": 10, " 3 / min ": 0.05} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "-1", "1/fortnight", "NaN"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) succeeded, want an error", in)
		}
	}
}

func TestMainWritesTheReport(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"--scenario", "article", "--duration", "2m", "--out", dir, "--seed", "9", "--progress", "never",
		"--contender", "fixed_window", "--contender", "sliding_window sub_windows=4", "--contender", "async lag=2s"}
	if code := MainContext(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"scenario article: 2m0s simulated", "seed 9", "fixed_window", "sliding_window 4×15s", "async sliding_log lag 2s"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	for _, f := range []string{"index.html", "series.csv", "table.txt", "scenario.yaml", "rate.svg", "rate.png", "count-01-fixed-window.svg", "count-02-sliding-window-4x15s.png", "window-03-async-sliding-log-lag-2s.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("report lacks %s: %v", f, err)
		}
	}
	// The scenario written with the report runs again to the same table.
	var again bytes.Buffer
	if code := MainContext(context.Background(), []string{"--scenario", filepath.Join(dir, "scenario.yaml"), "--progress", "never"}, &again, &stderr); code != 0 {
		t.Fatalf("rerun of scenario.yaml: exit %d: %s", code, stderr.String())
	}
	if again.String() != stdout.String() {
		t.Errorf("rerun of scenario.yaml printed another table:\n%s\nwant\n%s", again.String(), stdout.String())
	}
}

func TestMainFlagsAndErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--traffic", "bursts", "--rate", "50", "--on", "1s", "--off", "4s", "--limit", "20", "--period", "5s", "--duration", "30s", "--contender", "token_bucket burst=5", "--csv", "-"}, 0, "time_s,offered:units"},
		{[]string{"--rate", "10", "--limit", "5", "--period", "1s", "--duration", "5s", "--scale", "2s:3", "--contender", "sticky"}, 0, "sticky sliding_log K=4"},
		{[]string{"--limit", "5", "--period", "1s", "--duration", "5s"}, 2, "floodgate sim: --rate is required (the default traffic is poisson; e.g. --rate 100 (per second) or --rate 6000/m)\n"},
		{[]string{"--rate", "1", "--period", "1s", "--duration", "5s"}, 2, "floodgate sim: --limit is required (units per --period per key, e.g. --limit 100); or run a built-in scenario: --scenario article|distributed\n"},
		{[]string{"--rate", "1", "--limit", "5"}, 2, "floodgate sim: --period is required (the window of --limit, e.g. --period 1m); --duration is required (how much time to simulate, e.g. --duration 10m); or run a built-in scenario"},
		{[]string{"--limit", "0", "--period", "1s", "--rate", "1", "--duration", "5s"}, 2, "floodgate sim: --limit: must be > 0, got 0\n"},
		// Nothing describes a run: the built-in article scenario, and a
		// note naming the other ways.
		{nil, 0, `running the built-in "article" scenario (built-ins: --scenario article|distributed; or describe a run with --traffic, --rate, --limit and --period`},
		{nil, 0, "scenario article: 10m0s simulated, limit 100 per 1m per key, seed 1"},
		{[]string{"--duration", "1m", "--seed", "3"}, 0, "scenario article: 1m0s simulated, limit 100 per 1m per key, seed 3"},
		{[]string{"--contender", "token_bucket bogus=1"}, 2, `unknown field "bogus"`},
		{[]string{"--scale", "soon"}, 2, "want AT:K"},
		{[]string{"--scenario", "article", "--rate", "5"}, 2, "--rate describes traffic"},
		{[]string{"--scenario", "nope"}, 2, "not a file, nor a built-in scenario"},
		{[]string{"stray"}, 2, `unexpected argument "stray"`},
		{[]string{"--seed", "x", "--scenario", "article"}, 2, "--seed: want a non-negative integer"},
		// A flag given 0, or one the chosen traffic would ignore, is an
		// error rather than a silent default.
		{[]string{"--rate", "10", "--limit", "5", "--period", "1s", "--duration", "5s", "--instances", "0"}, 2, "--instances: must be between 1 and 1024, got 0"},
		{[]string{"--rate", "10", "--limit", "5", "--period", "1s", "--duration", "5s", "--cost", "0"}, 2, "--cost: must be between 1 and 2^30, got 0"},
		{[]string{"--rate", "10", "--limit", "5", "--period", "1s", "--duration", "5s", "--keys", "0"}, 2, "--keys: must be between 1 and 16777216, got 0"},
		{[]string{"--traffic", "steady", "--rate", "10", "--on", "1s", "--limit", "5", "--period", "1s", "--duration", "5s"}, 2, "--on applies to --traffic bursts only, not steady"},
		{[]string{"--rate", "10", "--peak", "20", "--limit", "5", "--period", "1s", "--duration", "5s"}, 2, "--peak applies to --traffic diurnal, ramp, flash only, not poisson"},
		{[]string{"--replay", "x.log", "--rate", "10", "--limit", "5", "--period", "1s"}, 2, "--rate does not apply to --replay"},
		{[]string{"--rate", "10", "--limit", "5", "--period", "1s", "--duration", "5s", "--contender", "async lag=-1s"}, 2, `--contender #1 "async lag=-1s": lag: must not be negative`},
		{[]string{"--replay", os.DevNull, "--limit", "5", "--period", "1s"}, 2, "--duration: the replay (" + os.DevNull + ") holds no request; set --duration"},
		// An unknown flag names the one it is likely a typo of, as the
		// other subcommands do, before the usage.
		{[]string{"--limt", "5"}, 2, "floodgate sim: flag provided but not defined: -limt (did you mean --limit?)\nusage: floodgate sim"},
		{[]string{"-contenders", "gcra"}, 2, "-contenders (did you mean --contender?)"},
		{[]string{"--duraton", "1m"}, 2, "-duraton (did you mean --duration?)"},
		{[]string{"--verbose"}, 2, "floodgate sim: flag provided but not defined: -verbose\nusage:"},
	} {
		var stdout, stderr bytes.Buffer
		code := MainContext(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("sim %q: exit %d, output %q; want exit %d and %q", tc.args, code, stdout.String()+stderr.String(), tc.code, tc.want)
		}
	}
}

// The flags-only and replay forms of the docs run every default contender
// end to end, through MainContext as `floodgate sim` calls it.
func TestMainWithoutContendersRunsTheDefaults(t *testing.T) {
	log := filepath.Join(t.TempDir(), "access.log")
	if err := os.WriteFile(log, []byte("0 alice\n0.2 bob 2\n0.4 alice\n1.5 alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--traffic", "poisson", "--rate", "120/m", "--limit", "100", "--period", "1m", "--duration", "1m"},
		{"--replay", log, "--limit", "10", "--period", "1s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := MainContext(context.Background(), append(args, "--progress", "never"), &stdout, &stderr); code != 0 {
			t.Errorf("sim %q: exit %d: %s", args, code, stderr.String())
			continue
		}
		for _, c := range DefaultContenders(100, sec(60)) {
			name := c.Algorithm
			if name == "" {
				name = c.Strategy + " sliding_log"
			}
			if !strings.Contains(stdout.String(), "\n  "+name) {
				t.Errorf("sim %q: table lacks the default contender %q:\n%s", args, name, stdout.String())
			}
		}
	}
}

// Every default contender compiles wherever the ideal does: smooth_warmup
// gets a warm-up of one period, and an algorithm that cannot hold the limit
// is left out rather than fail the run.
func TestDefaultContendersValidate(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		period Duration
	}{
		{100, sec(60)},
		{10, sec(1)},
		{1, Duration(time.Millisecond)},
		{3, Duration(1001 * time.Microsecond)}, // no 4 equal sub-windows
		{5000, Duration(time.Millisecond)},     // above one permit per µs: no smooth_*
		{1 << 20, sec(1)},
	} {
		sc := &Scenario{Limit: tc.limit, Period: tc.period, Duration: sec(1), Traffic: []Source{{Kind: SourceSteady, Rate: 1}}}
		if err := sc.Validate(); err != nil {
			t.Errorf("limit %d per %v with the default contenders: %v", tc.limit, tc.period.D(), err)
			continue
		}
		for _, c := range sc.Contenders {
			if c.kind == algo.SmoothWarmup && c.WarmupPeriod != tc.period {
				t.Errorf("limit %d per %v: smooth_warmup warms up over %v, want one period", tc.limit, tc.period.D(), c.WarmupPeriod.D())
			}
		}
	}
	if got := len(DefaultContenders(100, sec(60))); got != len(algo.Kinds())+1+len(strategies)-1 {
		t.Errorf("DefaultContenders(100, 1m) has %d contenders, want every algorithm, 4 sub-windows and every strategy", got)
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	sc, err := LoadScenario("distributed")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, sc); !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}
}

func TestProgressBar(t *testing.T) {
	var b bytes.Buffer
	p := newProgress(&b, time.Minute)
	p.draw(30 * time.Second)
	p.done(true)
	if got := b.String(); !strings.Contains(got, "\r[===============>              ]  50%  30s of 1m0s simulated") || !strings.HasSuffix(got, "100%  1m0s of 1m0s simulated\n") {
		t.Errorf("progress drew %q", got)
	}
}

func FuzzParseScenario(f *testing.F) {
	for _, p := range Presets() {
		data, _ := presetData(p)
		f.Add(data)
	}
	f.Add([]byte("limit: 1\nperiod: 1s\nduration: 1s\ntraffic: [{kind: flash, peak: 5}]\ncontenders: [{strategy: lease}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrScenario) {
				t.Fatalf("error %v does not wrap ErrScenario", err)
			}
			return
		}
		// Keep accepted scenarios small enough to run.
		if sc.Duration.D() <= 2*time.Second && sc.Bin.D() >= 100*time.Millisecond {
			total := 0.0
			for _, s := range sc.Traffic {
				if s.Kind == SourceReplay {
					return
				}
				total += float64(max(s.Rate, s.Peak))
			}
			if total < 2000 {
				if _, err := Run(context.Background(), sc); err != nil && !errors.Is(err, ErrScenario) {
					t.Fatalf("Run: %v", err)
				}
			}
		}
	})
}

func FuzzReadReplay(f *testing.F) {
	f.Add("0 a\n0.5 b 3\n# c\n")
	f.Add("2024-01-01T00:00:00Z a\n")
	f.Fuzz(func(t *testing.T, log string) {
		arr, _, err := readReplay("log", strings.NewReader(log), 0)
		if err != nil {
			if !errors.Is(err, ErrScenario) {
				t.Fatalf("error %v does not wrap ErrScenario", err)
			}
			return
		}
		for i := 1; i < len(arr); i++ {
			if arr[i].t < arr[i-1].t || arr[i].cost < 1 {
				t.Fatalf("arrival %d = %+v after %+v", i, arr[i], arr[i-1])
			}
		}
	})
}
