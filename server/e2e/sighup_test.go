package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPReloads: SIGHUP, operators' "reload", reloads the configuration
// at once — here with hot reload off, so that only the signal can — with
// the reload's log lines and metrics, a broken file keeping the rules in
// force; the process keeps serving and still drains and exits 0 on
// SIGTERM. Before, SIGHUP without --tls-cert ended it (exit 129, no drain).
func TestSIGHUPReloads(t *testing.T) {
	domain := uniqueDomain("hup")
	cfg := func(n int) string { return dayLimit(domain, n) }
	p := start(t, cfg(2), "--reload-interval", "0")
	path := configPath(t, p)
	rls, _ := rlsClient(t, p.grpc)
	limitNow := func(value string) uint32 { t.Helper(); return currentLimit(t, p, rls, domain, value) }
	waitLog := func(want string, n int) { t.Helper(); waitLogCount(t, p, want, n) }
	if err := os.WriteFile(path, []byte(cfg(7)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("configuration reloaded: 1 domain, 1 rule", 1)
	if n := limitNow("a"); n != 7 {
		t.Fatalf("limit %d after SIGHUP, want 7", n)
	}
	if err := os.WriteFile(path, []byte("domain: "+domain+"\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog("configuration not reloaded, the previous one stays in force", 1)
	if n := limitNow("b"); n != 7 {
		t.Fatalf("limit %d after SIGHUP on a broken file, want the previous 7", n)
	}
	code, body, _ := get("http://" + p.admin + "/metrics")
	if code != 200 || !strings.Contains(body, `floodgate_config_reloads_total{result="failure"} 1`) ||
		!strings.Contains(body, `floodgate_config_reloads_total{result="success"} 1`) {
		t.Errorf("reload metrics: %d\n%s", code, grep(body, "config_reloads"))
	}
	if err := p.stop(syscall.SIGTERM, 15*time.Second); err != nil {
		t.Fatalf("SIGTERM after SIGHUP: %v\n%s", err, p.logs())
	}
}
