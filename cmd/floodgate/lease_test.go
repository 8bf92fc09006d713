package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

// serve --lease-slice on Redis: requests are admitted from slices, so a
// hundred decisions cost about ten script calls; every decision is still
// right (a budget of 1000 admits the hundred).
func TestServeWithLeases(t *testing.T) {
	rs := testserver.NewRedis(t)
	if rs == nil {
		return
	}
	dir := t.TempDir()
	cfg := "domain: lt\ndescriptors:\n  - key: k\n    rate_limit:\n      name: quota\n      algorithm: token_bucket\n      unit: hour\n      requests_per_unit: 1000\n"
	if err := os.WriteFile(filepath.Join(dir, "lt.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--store", "redis://" + rs.Addr, "--lease-slice", "10", "--config", dir, "--envoy-headers",
			"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, &out, &errb)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop within 15s")
		}
	}()
	addr := regexp.MustCompile(`serving: http ([0-9.:]+),`)
	deadline := time.Now().Add(10 * time.Second)
	var m []string
	for m = addr.FindStringSubmatch(out.String()); m == nil; m = addr.FindStringSubmatch(out.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10s: %s %s", out.String(), errb.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the server to start
	}
	before := evalshaCalls(t, rs.Addr)
	for i := range 100 {
		resp, err := http.Post("http://"+m[1]+"/json", "application/json",
			strings.NewReader(`{"domain":"lt","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
		if got := resp.Header.Get("X-Ratelimit-Remaining"); got != strconv.Itoa(1000-i-1) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q, want %d", i, got, 1000-i-1)
		}
	}
	if calls := evalshaCalls(t, rs.Addr) - before; calls > 15 || calls < 5 {
		t.Fatalf("100 decisions made %d script calls on Redis, want about 10", calls)
	}
}

// evalshaCalls is Redis's count of EVALSHA calls so far.
func evalshaCalls(t *testing.T, addr string) int {
	t.Helper()
	v, err := testserver.RedisDo(addr, 5*time.Second, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	s, ok := v.(string)
	if !ok {
		t.Fatalf("INFO answered %T", v)
	}
	m := regexp.MustCompile(`cmdstat_evalsha:calls=(\d+)`).FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
