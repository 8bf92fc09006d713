package policy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of the config corpus")

// golden compares got with the golden file, or rewrites it under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./policy -run Golden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the output:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// corpus lists the YAML files (and directories) directly under dir.
func corpus(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	if len(out) == 0 {
		t.Fatalf("no configs in %s", dir)
	}
	return out
}

func goldenName(path string) string {
	return strings.TrimSuffix(strings.TrimSuffix(path, ".yaml"), ".yml") + ".golden"
}

// TestGoldenGood loads every good config and compares its compiled dump.
func TestGoldenGood(t *testing.T) {
	for _, dir := range []string{"testdata/good", "testdata/envoy"} {
		for _, path := range corpus(t, dir) {
			t.Run(path, func(t *testing.T) {
				cfg, err := Load(path)
				if err != nil {
					t.Fatalf("Load(%s):\n%v", path, err)
				}
				golden(t, goldenName(path), cfg.Dump())
			})
		}
	}
}

// TestGoldenWarn loads every config of testdata/warn, each valid with at
// least one warning, and compares its warnings, as floodgate validate
// prints them, and its compiled dump with the golden file.
func TestGoldenWarn(t *testing.T) {
	for _, path := range corpus(t, "testdata/warn") {
		t.Run(path, func(t *testing.T) {
			cfg, err := Load(path)
			if err != nil {
				t.Fatalf("Load(%s):\n%v", path, err)
			}
			if len(cfg.Warnings()) == 0 {
				t.Errorf("Load(%s): no warning", path)
			}
			golden(t, goldenName(path), warningLines(cfg)+cfg.Dump())
		})
	}
}

// TestGoldenEnvoyDirectory loads the Envoy examples as one directory, the
// way envoyproxy/ratelimit loads its runtime folder.
func TestGoldenEnvoyDirectory(t *testing.T) {
	cfg, err := Load("testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(cfg.Domains()); got != 10 {
		t.Fatalf("loaded %d domains from testdata/envoy, want 10", got)
	}
	golden(t, "testdata/envoy.golden", cfg.Dump())
}

// TestGoldenBad checks that every bad config yields exactly the problems
// in its golden file, each as file:line: message.
func TestGoldenBad(t *testing.T) {
	for _, path := range corpus(t, "testdata/bad") {
		t.Run(path, func(t *testing.T) {
			cfg, err := Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = valid config, want problems:\n%s", path, cfg.Dump())
			}
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Load(%s) error %T, want Problems", path, err)
			}
			for _, p := range ps {
				if p.Line <= 0 {
					t.Errorf("problem without a line: %s", p)
				}
			}
			name := goldenName(path)
			if strings.HasSuffix(path, "dupdomain") {
				name = path + ".golden"
			}
			golden(t, name, ps.Error()+"\n")
			if got := Validate(path); len(got) != len(ps) {
				t.Errorf("Validate found %d problems, Load %d", len(got), len(ps))
			}
		})
	}
}

func TestLoadMissingPath(t *testing.T) {
	ps := Validate("testdata/no-such-file.yaml")
	if len(ps) != 1 || !strings.Contains(ps[0].String(), "testdata/no-such-file.yaml: cannot read configuration") {
		t.Fatalf("Validate(missing) = %v", ps)
	}
}

func TestLoadDirectorySkipsHidden(t *testing.T) {
	dir := t.TempDir()
	// A Kubernetes ConfigMap mount: the files are symlinks into ..data.
	data := filepath.Join(dir, "..2026_01_01")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "domain: k8s\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3}\n"
	if err := os.WriteFile(filepath.Join(data, "rules.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_01_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README.txt"), []byte("not yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(ConfigMap mount): %v", err)
	}
	if cfg.Domain("k8s") == nil || len(cfg.Domains()) != 1 {
		t.Fatalf("domains %v, want just k8s", cfg.Dump())
	}
}

// A configuration path that is a symbolic link to a directory
// (/etc/floodgate -> /srv/rules-v42, a "current" link swapped on deploy)
// loads the directory's files, named under the path given, and a swap of
// the link is a change of content for Watch's fingerprint.
func TestLoadSymlinkedDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(sub, domain string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		body := "domain: " + domain + "\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
		if err := os.WriteFile(filepath.Join(dir, sub, "rules.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("v1", "one")
	write("v2", "two")
	link := filepath.Join(dir, "current")
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	// A link to the link, as /etc/floodgate -> current -> v1.
	outer := filepath.Join(dir, "etc-floodgate")
	if err := os.Symlink("current", outer); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{link, outer} {
		cfg, err := Load(path)
		if err != nil {
			t.Fatalf("Load(%s): %v", path, err)
		}
		if cfg.Domain("one") == nil || len(cfg.Domains()) != 1 {
			t.Fatalf("Load(%s): domains %v, want just one", path, cfg.Dump())
		}
		if ps := Validate(path); len(ps) != 0 {
			t.Fatalf("Validate(%s) = %v", path, ps)
		}
	}
	srcs, _, _ := readSources(outer)
	if len(srcs) != 1 || srcs[0].name != filepath.Join(outer, "rules.yaml") {
		t.Fatalf("sources %+v, want %s", srcs, filepath.Join(outer, "rules.yaml"))
	}
	before := sourcesSum(readSources(outer))
	tmp := filepath.Join(dir, "current.tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	if sourcesSum(readSources(outer)) == before {
		t.Fatal("swapping the link did not change the fingerprint")
	}
	if cfg, err := Load(outer); err != nil || cfg.Domain("two") == nil {
		t.Fatalf("after the swap: %v, %v", cfg, err)
	}
}

func TestParseDurations(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{{"30s", "30s"}, {"5m", "5m0s"}, {"36h", "36h0m0s"}, {"7d", "168h0m0s"}, {"1d12h", "36h0m0s"}, {"2w", "336h0m0s"}} {
		d, err := parseDuration(tc.in)
		if err != nil || d.String() != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %s", tc.in, d, err, tc.want)
		}
	}
	for _, bad := range []string{"", "10 seconds", "1d-3h", "999999999d", "d"} {
		if _, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) = nil error, want one", bad)
		}
	}
}

// FuzzLoad: no input makes the loader panic, and every problem it reports
// has a line.
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad", "testdata/envoy", "testdata/upstream", "testdata/warn"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("domain: x\ndescriptors: &d\n  - key: a\n    descriptors: *d\n"))
	f.Add([]byte("\xff\xfe"))
	f.Add([]byte(aliasBomb()))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		if err == nil {
			_ = cfg.Dump()
			for _, w := range cfg.Warnings() {
				if w.Line <= 0 || w.File != "fuzz.yaml" || w.Message == "" {
					t.Fatalf("bad warning %+v", w)
				}
			}
			return
		}
		var ps Problems
		if !errors.As(err, &ps) || len(ps) == 0 {
			t.Fatalf("error %v is not Problems", err)
		}
		for _, p := range ps {
			if p.Line <= 0 || p.File != "fuzz.yaml" || p.Message == "" {
				t.Fatalf("bad problem %+v", p)
			}
		}
	})
}

type widgetSection struct {
	Items []struct {
		Name string `yaml:"name"`
		Size int    `yaml:"size"`
	} `yaml:"items"`
}

// TestRegisteredSection: a domain-level section another package owns is
// checked for unknown fields, decoded, validated and kept, with problems at
// their lines.
func TestRegisteredSection(t *testing.T) {
	RegisterSection("widgets", func(decode func(any) error) (any, error) {
		var s widgetSection
		if err := decode(&s); err != nil {
			return nil, err
		}
		for i, it := range s.Items {
			if it.Size < 0 {
				return nil, fmt.Errorf("widget: items[%d].size: must be >= 0, got %d", i, it.Size)
			}
		}
		return &s, nil
	})
	t.Cleanup(func() {
		sectionsMu.Lock()
		delete(sections, "widgets")
		sectionsMu.Unlock()
	})
	cfg, err := Parse("w.yaml", []byte("domain: d\nwidgets:\n  items:\n    - name: a\n      size: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := cfg.Domain("d").Sections["widgets"].(*widgetSection); !ok || w.Items[0].Size != 3 {
		t.Fatalf("Sections = %#v", cfg.Domain("d").Sections)
	}
	for body, want := range map[string]string{
		"domain: d\nwidgets:\n  items:\n    - name: a\n      colour: red\n": `w.yaml:5: unknown field "colour" in widgets.items[0]`,
		"domain: d\nwidgets:\n  items:\n    - name: a\n      size: big\n":   "w.yaml:5: widgets: cannot unmarshal !!str `big` into int",
		"domain: d\nwidgets:\n  items:\n    - name: a\n    - size: -1\n":    "w.yaml:5: widgets: items[1].size: must be >= 0, got -1",
	} {
		_, err := Parse("w.yaml", []byte(body))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", body, err, want)
		}
	}
}

// TestExampleConfig: the configuration the server loads by default is valid.
func TestExampleConfig(t *testing.T) {
	cfg, err := Load("../examples/config")
	if err != nil {
		t.Fatalf("examples/config:\n%v", err)
	}
	for _, d := range []string{"api", "saas", "edge"} {
		if cfg.Domain(d) == nil {
			t.Errorf("examples/config lacks domain %q", d)
		}
	}
}

// TestDuplicateDomainStillChecked: a domain declared a second time is
// reported, and its rules are checked all the same, so that one load
// reports every problem of every file.
func TestDuplicateDomainStillChecked(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, ceil: 20}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Load(dir)
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 2 {
		t.Fatalf("Load = %v, want two problems: the duplicate and its rule's ceil", err)
	}
	if !strings.Contains(ps[0].Message, "duplicate domain") || !strings.Contains(ps[1].Message, "ceil") || ps[1].Line != 4 {
		t.Fatalf("problems %v, want the duplicate (line 1) and the ceil (line 4) of b.yaml", ps)
	}
}

// A requests_per_unit: 0 rule keeps the window it was written with: its
// status reports it (the w of the header fields, and the reset at the
// window's end), not the bare unit or none.
func TestDenyKeepsItsWindow(t *testing.T) {
	cfg, err := Load("testdata/good/deny_windows.yaml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2027, time.February, 10, 0, 0, 30, 0, time.UTC)
	e := newMemEngine(t, cfg, frozen(now), WithClock(frozen(now)))
	for _, tc := range []struct {
		key    string
		period time.Duration
		window time.Duration
	}{
		{"period", 90 * time.Second, 90 * time.Second},
		{"multiplied", 5 * time.Minute, 5 * time.Minute},
		{"unit", time.Hour, time.Hour},
		{"calendar", 0, 28 * 24 * time.Hour}, // February 2027
	} {
		r := cfg.Match("deny_windows", ent(tc.key, "x"))
		if r == nil || !r.Deny || r.Params.Period != tc.period {
			t.Errorf("%s: rule %+v, want a deny rule of period %v", tc.key, r, tc.period)
			continue
		}
		resp, err := e.Decide(context.Background(), req("deny_windows", ent(tc.key, "x")))
		if err != nil {
			t.Fatal(err)
		}
		if s := resp.Statuses[0]; resp.Code != CodeOverLimit || s.Window != tc.window {
			t.Errorf("%s: %s window %v, want OVER_LIMIT with a window of %v", tc.key, resp, s.Window, tc.window)
		}
	}
}

// The max_wait warning of a fixed window says what the engine does: a
// request refused more than max_wait before the window turns is rejected
// at once, one refused within max_wait of it may wait.
func TestShortMaxWaitOnAFixedWindow(t *testing.T) {
	cfg, err := Parse("w.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, strategy: wait, max_wait: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || w[0].Line != 4 || !strings.HasPrefix(w[0].Message, "max_wait 1s is shorter than this rule's window (1h)") {
		t.Fatalf("warnings %v, want the short max_wait at line 4", w)
	}
	hour := time.Unix(1_800_000_000, 0).Truncate(time.Hour)
	now := hour.Add(10 * time.Minute)
	clock := func() time.Time { return now }
	e := newMemEngine(t, cfg, clock, WithClock(clock))
	decide := func() Response {
		t.Helper()
		resp, err := e.Decide(context.Background(), req("d", ent("k", "x")))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for range 10 {
		decide()
	}
	if resp := decide(); resp.Code != CodeOverLimit || resp.Strategy != StrategyReject {
		t.Errorf("11th at 10m: %s, want OVER_LIMIT, strategy reject (the window turns in 50m)", resp)
	}
	now = hour.Add(time.Hour - 500*time.Millisecond)
	if resp := decide(); resp.Code != CodeOverLimit || resp.Strategy != StrategyWait || resp.Delay != 500*time.Millisecond {
		t.Errorf("at 500ms before the hour: %s delay %v, want OVER_LIMIT, strategy wait, delay 500ms", resp, resp.Delay)
	}
}

// A Floodgate field of rate_limit written on the descriptor itself says
// where it belongs; a typo still gets its "did you mean".
func TestLimitFieldOnDescriptor(t *testing.T) {
	for body, want := range map[string]string{
		"domain: d\ndescriptors:\n  - key: k\n    burst: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n":        `d.yaml:4: unknown field "burst" in descriptor (it belongs inside rate_limit:)`,
		"domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n    rate_limit: {unit: second, requests_per_unit: 1}\n": `d.yaml:4: unknown field "algorithm" in descriptor (it belongs inside rate_limit:)`,
		"domain: d\ndescriptors:\n  - key: k\n    strategy: wait\n    rate_limit: {unit: second, requests_per_unit: 1}\n":  `d.yaml:4: unknown field "strategy" in descriptor (it belongs inside rate_limit:)`,
		"domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: second, requests_per_unit: 1}\n":                       `d.yaml:4: unknown field "ratelimit" in descriptor (did you mean "rate_limit"?)`,
	} {
		_, err := Parse("d.yaml", []byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", body, err, want)
		}
	}
}
