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
// noeviction it says nothing.
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
	if _, err := testserver.RedisDo(srv.Addr, time.Second, "CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		t.Fatal(err)
	}
	if log := serve(); strings.Contains(log, "maxmemory-policy") {
		t.Errorf("noeviction: warned anyway:\n%s", log)
	}
}
