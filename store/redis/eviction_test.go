package redis

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

func TestEvictionSafe(t *testing.T) {
	for p, want := range map[string]bool{
		"noeviction": true, "NoEviction": true,
		"allkeys-lru": false, "allkeys-lfu": false, "allkeys-random": false,
		"volatile-lru": false, "volatile-lfu": false, "volatile-random": false, "volatile-ttl": false,
		"": false,
	} {
		if got := EvictionSafe(p); got != want {
			t.Errorf("EvictionSafe(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestEvictionPolicy reads a private server's policy as it changes, a
// Cluster's, and fails for a user that may not run CONFIG.
func TestEvictionPolicy(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		t.Skip("no redis-server")
	}
	s := openT(t, "redis://"+srv.Addr, WithTimeout(2*time.Second))
	for _, p := range []string{"noeviction", "volatile-lru", "allkeys-lfu"} {
		if _, err := testserver.RedisDo(srv.Addr, time.Second, "CONFIG", "SET", "maxmemory-policy", p); err != nil {
			t.Fatal(err)
		}
		got, err := s.EvictionPolicy(t.Context())
		if err != nil || got != p {
			t.Errorf("EvictionPolicy = %q, %v, want %q", got, err, p)
		}
	}
	c := openT(t, clusterURL(t), WithTimeout(2*time.Second))
	if got, err := c.EvictionPolicy(t.Context()); err != nil || got != "noeviction" {
		t.Errorf("on the Cluster: EvictionPolicy = %q, %v, want noeviction", got, err)
	}
	// A user without CONFIG (as managed Redis refuses it).
	rules := append([]string{"ACL", "SETUSER", "noconfig", "on", ">pw", "~fg:*"}, ACLRules...)
	if _, err := testserver.RedisDo(srv.Addr, time.Second, rules...); err != nil {
		t.Fatal(err)
	}
	u := openT(t, "redis://noconfig:pw@"+srv.Addr, WithTimeout(2*time.Second))
	if got, err := u.EvictionPolicy(t.Context()); err == nil {
		t.Errorf("EvictionPolicy for a user without +config|get = %q, want an error", got)
	} else {
		t.Logf("without CONFIG: %v", err)
	}
}
