package main

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

// TestServeWarnsOfEvictingRedis: a Redis store whose maxmemory-policy
// evicts keys (allkeys-lru) would forget counters under memory pressure,
// each a fresh budget; serve says so at start, naming the policy. Under
// noeviction it says nothing. Under --start-degraded with the server down
// at start, it says so once the store opens.
func TestServeWarnsOfEvictingRedis(t *testing.T) {
	srv := testserver.NewRedis(t, "--maxmemory-policy", "allkeys-lru")
	dirCfg, _ := writeConfig(t, observeConfig)
	serve := func() string {
		_, errb, stop := startServe(t, "--config", dirCfg, "--store", "redis://"+srv.Addr)
		if code := stop(); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		return errb.String()
	}
	const warning = "--store: the Redis maxmemory-policy is allkeys-lru, which evicts rate limit counters"
	if log := serve(); !strings.Contains(log, warning) {
		t.Errorf("allkeys-lru: the log lacks %q:\n%s", warning, log)
	}
	// Under --start-degraded with the server down at start, the check
	// comes once the background open has opened the store.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	p := startBinary(t, nil, "--config", dirCfg, "--store", "redis://"+srv.Addr, "--start-degraded")
	if strings.Contains(p.Stderr(), "maxmemory-policy") {
		t.Fatalf("--start-degraded: a verdict before the store could be asked:\n%s", p.Stderr())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := testserver.RedisDo(srv.Addr, time.Second, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	// The background open's backoff is at most 5 s, and serve looks every
	// second.
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(p.Stderr(), warning) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // waiting for the open, not for math
	}
	if !strings.Contains(p.Stderr(), warning) {
		t.Errorf("--start-degraded: once the store opened, the log lacks %q:\n%s", warning, p.Stderr())
	}
	if _, err := testserver.RedisDo(srv.Addr, time.Second, "CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		t.Fatal(err)
	}
	if log := serve(); strings.Contains(log, "maxmemory-policy") {
		t.Errorf("noeviction: warned anyway:\n%s", log)
	}
}
