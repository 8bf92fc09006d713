package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A report's scenario.yaml writes of each traffic source the fields it
// set, not every field of every kind at its zero ("peak: 0", "on: 0s",
// `process: ""`, `file: ""` on a poisson source, which a reader would
// take for settings of it), and reruns to the same table.
func TestReportScenarioYAMLWritesSourcesAsSet(t *testing.T) {
	sc := &Scenario{Name: "t", Seed: 1, Limit: 5, Period: Duration(time.Second), Duration: Duration(3 * time.Second),
		Traffic:    []Source{{Kind: SourcePoisson, Rate: 10}, {Kind: SourceFlash, Peak: 20, At: Duration(time.Second), Hold: Duration(time.Second), KeyOffset: 1}},
		Contenders: []Contender{{Algorithm: "gcra"}}}
	res, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, res); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "scenario.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, traffic, _ := strings.Cut(string(data), "traffic:\n")
	traffic, _, _ = strings.Cut(traffic, "contenders:")
	want := "    - kind: poisson\n      rate: 10\n      keys: 1\n      cost: 1\n" +
		"    - kind: flash\n      peak: 20\n      keys: 1\n      key_offset: 1\n      cost: 1\n      at: 1s\n      hold: 1s\n"
	if traffic != want {
		t.Errorf("scenario.yaml's traffic:\n%s\nwant:\n%s", traffic, want)
	}
	again, err := ParseScenario("scenario.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	res2, err := Run(context.Background(), again)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := WriteTable(&a, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&b, res2); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("rerun of scenario.yaml:\n%s\nwant:\n%s", b.String(), a.String())
	}
}
