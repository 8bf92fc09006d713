package sim

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// committedDocs maps each file of docs/sim to the report file it is a copy
// of, per built-in scenario, as docs/SIM.md's "Regenerating the committed
// charts" lists them.
var committedDocs = map[string]map[string]string{
	"article": {
		"article-table.txt":                 "table.txt",
		"article-fixed-window.svg":          "count-01-fixed-window.svg",
		"article-fixed-window.png":          "count-01-fixed-window.png",
		"article-sliding-window.svg":        "count-02-sliding-window-1x1m.svg",
		"article-sliding-window.png":        "count-02-sliding-window-1x1m.png",
		"article-sub-windows.svg":           "count-03-sliding-window-4x15s.svg",
		"article-sub-windows.png":           "count-03-sliding-window-4x15s.png",
		"article-fixed-window-admitted.svg": "window-01-fixed-window.svg",
		"article-fixed-window-admitted.png": "window-01-fixed-window.png",
	},
	"distributed": {
		"distributed-table.txt":  "table.txt",
		"distributed-rate.svg":   "rate.svg",
		"distributed-rate.png":   "rate.png",
		"distributed-local.svg":  "rate-02-local-sliding-log-4-random.svg",
		"distributed-local.png":  "rate-02-local-sliding-log-4-random.png",
		"distributed-sticky.svg": "rate-03-sticky-sliding-log-k-4.svg",
		"distributed-sticky.png": "rate-03-sticky-sliding-log-k-4.png",
		"distributed-async.svg":  "rate-04-async-sliding-log-lag-250ms.svg",
		"distributed-async.png":  "rate-04-async-sliding-log-lag-250ms.png",
		"distributed-lease.svg":  "rate-05-lease-sliding-log-10-lease.svg",
		"distributed-lease.png":  "rate-05-lease-sliding-log-10-lease.png",
	},
}

// The tables and charts committed under docs/sim are what the commands
// SIM.md gives print and write today, byte for byte: the docs show the
// binary's output, not an older one. -update copies them over after a
// deliberate change.
func TestCommittedDocsMatchTheSimulator(t *testing.T) {
	docs := filepath.Join("..", "docs", "sim")
	entries, err := os.ReadDir(docs)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, files := range committedDocs {
		for f := range files {
			listed[f] = true
		}
	}
	for _, e := range entries {
		if !listed[e.Name()] {
			t.Errorf("docs/sim/%s is not known to this test: add where it comes from to committedDocs", e.Name())
		}
	}
	for scenario, files := range committedDocs {
		dir := t.TempDir()
		var stdout, stderr bytes.Buffer
		if code := MainContext(context.Background(), []string{"--scenario", scenario, "--out", dir, "--progress", "never"}, &stdout, &stderr); code != 0 {
			t.Fatalf("floodgate sim --scenario %s --out DIR: exit %d: %s", scenario, code, stderr.String())
		}
		table, err := os.ReadFile(filepath.Join(dir, "table.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(table, stdout.Bytes()) {
			t.Errorf("--scenario %s: the report's table.txt is not the table printed", scenario)
		}
		for doc, src := range files {
			got, err := os.ReadFile(filepath.Join(dir, src))
			if err != nil {
				t.Fatalf("--scenario %s: the report has no %s: %v", scenario, src, err)
			}
			path := filepath.Join(docs, doc)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("docs/sim/%s differs from %s of floodgate sim --scenario %s --out DIR; regenerate it (go test ./sim -run TestCommittedDocs -update)", doc, src, scenario)
			}
		}
	}
}
