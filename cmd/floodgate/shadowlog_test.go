package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
)

// A shadow rule whose count the store refuses for a reason other than an
// outage (here the Redis user may not touch its keys: NOPERM) is a WARN
// line of serve's log naming the rule, while the request is decided
// without it: serve hands its logger to the policy engine.
func TestServeLogsShadowStoreError(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		t.Skip("no redis-server")
	}
	args := append([]string{"ACL", "SETUSER", "fgshadow", "reset", "on", ">shadow-pass", "~" + redis.DefaultProbeKey, "~fg:d|a=*"}, redis.ACLRules...)
	if _, err := testserver.RedisDo(srv.Addr, 2*time.Second, args...); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	dir := t.TempDir()
	cfg := "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: enforced, unit: day, requests_per_unit: 100}\n" +
		"  - key: s\n    shadow_mode: true\n    rate_limit: {name: dry, unit: day, requests_per_unit: 100}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, stop := startServe(t, "--config", dir, "--reload-interval", "0", "--store", "redis://fgshadow:shadow-pass@"+srv.Addr)
	defer stop()
	httpAddr, _, _ := serveAddrs(t, out.String())
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"x"}]},{"entries":[{"key":"s","value":"secret-value"}]}]}`
	resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/json: %d, want 200 (a shadow rule's failed count never fails the request)", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l := errb.String()
		if i := strings.Index(l, "level=WARN"); i >= 0 && strings.Contains(l, "rule=dry") && strings.Contains(l, "NOPERM") {
			if strings.Contains(l, "secret-value") {
				t.Errorf("the log quotes the descriptor's value:\n%s", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no WARN naming rule dry and NOPERM within 5s; log:\n%s", l)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the log line, not for math
	}
}
