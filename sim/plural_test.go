package sim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCountsOfOne: every count printed with a noun — the table's offered
// line, the HTML page's, the scale events' labels, the run's summary on
// stderr, the errors that count fields, contenders and instances — is
// singular for 1 ("1 request", not "1 requests").
func TestCountsOfOne(t *testing.T) {
	log := filepath.Join(t.TempDir(), "one.log")
	if err := os.WriteFile(log, []byte("0.5 alice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report")
	code, stdout, stderr := mainRun(t, "--replay", log, "--limit", "10", "--period", "1s", "--contender", "fixed_window", "--scale", "0.5s:1", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := "offered: 1 request, 1 unit; the perfect sliding window admits 1 unit\n"; !strings.Contains(stdout, want) {
		t.Errorf("table:\n%s\nwant %q", stdout, want)
	}
	if want := "simulated 1 request × 2 contenders in "; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if want := ", 1 request offered."; !strings.Contains(string(page), want) {
		t.Errorf("index.html lacks %q", want)
	}
	for _, name := range []string{"rate.svg", "window-01-fixed-window.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(svg), "scale to 1 instance<") {
			t.Errorf("%s lacks the label \"scale to 1 instance\"", name)
		}
	}

	if err := os.WriteFile(log, []byte("0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = mainRun(t, "--replay", log, "--limit", "10", "--period", "1s", "--contender", "fixed_window")
	if want := `want "time key [cost]", got 1 field` + "\n"; code != 2 || !strings.HasSuffix(stderr, want) {
		t.Errorf("a line of one field: exit %d, stderr %q; want exit 2 and %q", code, stderr, want)
	}

	old := maxKeyTableBytes
	maxKeyTableBytes = 1 << 10
	defer func() { maxKeyTableBytes = old }()
	sc := &Scenario{
		Duration: sec(1), Limit: 10, Period: sec(1), Instances: 1,
		Traffic:    []Source{{Kind: SourceSteady, Rate: 10, Keys: 1000}},
		Contenders: []Contender{{Strategy: StrategyLocal}},
	}
	_, err = Run(context.Background(), sc)
	if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), "1000 keys × 1 contender, the ideal and the offered traffic (up to 1 instance) need") {
		t.Errorf("Run over the key tables' bound: %v, want one counting 1 contender and 1 instance", err)
	}
}

// TestTableCountsOfOne: WriteTable on its own, for a library user.
func TestTableCountsOfOne(t *testing.T) {
	sc := &Scenario{
		Duration: sec(1), Limit: 10, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 1}},
		Contenders: []Contender{{Algorithm: "gcra"}},
	}
	res := run(t, sc)
	var b bytes.Buffer
	if err := WriteTable(&b, res); err != nil {
		t.Fatal(err)
	}
	if res.Offered.Metrics.Requests != 1 {
		t.Fatalf("steady 1/s over 1s offered %d requests, want 1", res.Offered.Metrics.Requests)
	}
	if want := "offered: 1 request, 1 unit; the perfect sliding window admits 1 unit\n"; !strings.Contains(b.String(), want) {
		t.Errorf("table:\n%s\nwant %q", b.String(), want)
	}
}
