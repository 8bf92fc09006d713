package sim

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReportOverALargerOneLeavesNoStaleCharts: a report written into the
// folder of an earlier one with more contenders leaves only its own
// charts there, the ones its index.html shows; the files the user put
// there, even with chart-like names the simulator does not give, stay.
func TestReportOverALargerOneLeavesNoStaleCharts(t *testing.T) {
	dir := t.TempDir()
	three := &Scenario{
		Duration: sec(2), Limit: 10, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 20, Keys: 2}},
		Contenders: []Contender{{Algorithm: "fixed_window"}, {Algorithm: "sliding_window"}, {Algorithm: "gcra"}},
	}
	if err := WriteReport(dir, run(t, three)); err != nil {
		t.Fatal(err)
	}
	mine := []string{"notes.txt", "my-rate.svg", "rate.svg.bak", "window-01-fixed-window.svg.orig", "count-1-x.png", "window-99-keep.jpg"}
	for _, name := range mine {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("the user's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A directory named as a chart is not a chart file either.
	if err := os.Mkdir(filepath.Join(dir, "window-07-dir.png"), 0o755); err != nil {
		t.Fatal(err)
	}
	one := &Scenario{
		Duration: sec(2), Limit: 10, Period: sec(1),
		Traffic:    []Source{{Kind: SourceSteady, Rate: 20}},
		Contenders: []Contender{{Algorithm: "token_bucket"}},
	}
	if err := WriteReport(dir, run(t, one)); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]+\.(?:svg|png))"`).FindAllStringSubmatch(string(page), -1) {
		shown = append(shown, m[1])
	}
	slices.Sort(shown)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var charts []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && !slices.Contains(mine, name) && (strings.HasSuffix(name, ".svg") || strings.HasSuffix(name, ".png")) {
			charts = append(charts, name)
		}
	}
	want := []string{"rate.png", "rate.svg", "window-01-token-bucket.png", "window-01-token-bucket.svg"}
	if !slices.Equal(shown, want) || !slices.Equal(charts, want) {
		t.Errorf("index.html shows %v, the folder holds %v; want both %v", shown, charts, want)
	}
	for _, name := range append(mine, "window-07-dir.png") {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the user's %s: %v", name, err)
		}
	}
}
