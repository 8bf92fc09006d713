package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

const (
	// fitsConfig's sliding log of 1000 units takes about 8 kB a key.
	fitsConfig = `domain: app
descriptors:
  - key: user
    rate_limit: {name: small-log, algorithm: sliding_log, period: 1m, requests_per_unit: 1000}
`
	// bigConfig adds one of 1 000 000 units, 8 MB a key: more than
	// memcached's 1 MiB item.
	bigConfig = fitsConfig + `  - key: login
    rate_limit: {name: biglog, algorithm: sliding_log, period: 1h, requests_per_unit: 1000000}
`
	// concConfig's concurrency limit of 100 000 slots takes up to 1.8 MB
	// a key, of 50 000 up to 900 kB.
	concConfig = `domain: jobs
descriptors:
  - key: tenant
    descriptors:
      - key: job
        rate_limit: {algorithm: concurrency, requests_per_unit: 100000, lease_ttl: 1m}
  - key: worker
    rate_limit: {algorithm: concurrency, requests_per_unit: 50000, lease_ttl: 1m}
`
)

// TestServeWarnsOfMemcachedItemSize: a rule whose state cannot fit one
// memcached item (a sliding log of 1 000 000 units, 8 MB, against -I 1m)
// was taken silently: floodgate validate says valid, serve started, and
// the decisions on a key failed once its state outgrew the item. Now serve
// WARNs at start naming the rule, its algorithm and limit, the sizes and
// the way out; at a reload that brings such a rule; and, under
// --start-degraded with memcached down at start, once the store opens. A
// rule that fits gives no WARN.
func TestServeWarnsOfMemcachedItemSize(t *testing.T) {
	srv := testserver.NewMemcached(t)
	const warning = `level=WARN msg="--store: rule app/biglog (`
	wants := []string{warning, "sliding_log with a limit of 1000000 units, keeps up to 8000",
		"bytes a key in one memcached item (key and item header included), over the servers' item size limit of 1048576 bytes",
		"raise memcached's -I, lower the limit, or use another algorithm, e.g. sliding_window"}

	t.Run("start", func(t *testing.T) {
		dir, _ := writeConfig(t, bigConfig)
		p := startBinary(t, nil, "--config", dir, "--store", "memcached://"+srv.Addr)
		// The serving line is on stdout; stderr, read apart, may lag it.
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.Stderr(), warning) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		for _, want := range wants {
			if !strings.Contains(p.Stderr(), want) {
				t.Errorf("the log lacks %q:\n%s", want, p.Stderr())
			}
		}
		if n := strings.Count(p.Stderr(), "bytes a key in one memcached item"); n != 1 {
			t.Errorf("%d item size WARNs, want 1 (biglog's; small-log fits):\n%s", n, p.Stderr())
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		dir, _ := writeConfig(t, concConfig)
		p := startBinary(t, nil, "--config", dir, "--store", "memcached://"+srv.Addr)
		// The rule has no name: its descriptor path names it.
		const want = `level=WARN msg="--store: rule jobs/tenant.job (`
		if !strings.Contains(p.Stderr(), want) || !strings.Contains(p.Stderr(), "concurrency with a limit of 100000 slots, keeps up to 1800") {
			t.Errorf("the log lacks %q with the concurrency limit of 100000 slots:\n%s", want, p.Stderr())
		}
		if n := strings.Count(p.Stderr(), "bytes a key in one memcached item"); n != 1 {
			t.Errorf("%d item size WARNs, want 1 (tenant.job's; worker's 50 000 slots fit):\n%s", n, p.Stderr())
		}
	})
	t.Run("start-degraded", func(t *testing.T) {
		down := testserver.NewMemcached(t)
		if err := down.Kill(); err != nil {
			t.Fatal(err)
		}
		dir, _ := writeConfig(t, bigConfig)
		p := startBinary(t, nil, "--config", dir, "--store", "memcached://"+down.Addr, "--start-degraded")
		if strings.Contains(p.Stderr(), "memcached item") {
			t.Fatalf("a WARN before the ring could be asked for its item size:\n%s", p.Stderr())
		}
		if err := down.Restart(); err != nil {
			t.Fatal(err)
		}
		// The background open's backoff is at most 5 s, and serve looks
		// every second.
		deadline := time.Now().Add(15 * time.Second)
		for !strings.Contains(p.Stderr(), warning) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // waiting for the open, not for math
		}
		for _, want := range wants {
			if !strings.Contains(p.Stderr(), want) {
				t.Errorf("once the store opened, the log lacks %q:\n%s", want, p.Stderr())
			}
		}
	})
	t.Run("reload", func(t *testing.T) {
		dir, file := writeConfig(t, fitsConfig)
		p := startBinary(t, nil, "--config", dir, "--store", "memcached://"+srv.Addr, "--reload-interval", "0")
		if strings.Contains(p.Stderr(), "memcached item") {
			t.Fatalf("a rule that fits, and a WARN all the same:\n%s", p.Stderr())
		}
		if err := os.WriteFile(file, []byte(bigConfig), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(p.Stderr(), warning) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // waiting for the reload, not for math
		}
		for _, want := range append(wants, "configuration reloaded: 1 domain, 2 rules") {
			if !strings.Contains(p.Stderr(), want) {
				t.Errorf("after the reload the log lacks %q:\n%s", want, p.Stderr())
			}
		}
		if !strings.Contains(p.Stderr(), "e.g. sliding_window (docs/STORES.md)\" event=reload") {
			t.Errorf("the reload's WARN is not a reload event:\n%s", p.Stderr())
		}
	})
}
