package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestHotReload changes the configuration file under a running binary: a
// valid change is in force within the reload interval; a broken file keeps
// the previous limits and is reported.
func TestHotReload(t *testing.T) {
	domain := uniqueDomain("reload")
	cfg := func(n int) string { return dayLimit(domain, n) }
	p := start(t, cfg(2), "--reload-interval", "100ms")
	path := configPath(t, p)
	rls, _ := rlsClient(t, p.grpc)
	limitNow := func(value string) uint32 { t.Helper(); return currentLimit(t, p, rls, domain, value) }
	if n := limitNow("a"); n != 2 {
		t.Fatalf("limit %d at start, want 2", n)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s\n%s", what, p.logs())
			}
			time.Sleep(50 * time.Millisecond) // polling a real process
		}
	}
	if err := os.WriteFile(path, []byte(cfg(7)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A new value at each look: a look takes a unit, and the reload
	// comes one or two polls after the write (policy.Watcher waits for
	// the file to settle), so the old limit of 2 can answer more than twice.
	looks := 0
	waitFor("the new limit 7 in force", func() bool { looks++; return limitNow(fmt.Sprintf("b%d", looks)) == 7 })
	if err := os.WriteFile(path, []byte("domain: "+domain+"\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("the broken file reported", func() bool { return strings.Contains(p.logs(), "configuration not reloaded") })
	if n := limitNow("c"); n != 7 {
		t.Fatalf("limit %d after a broken file, want the previous 7", n)
	}
	if !strings.Contains(p.logs(), "config.yaml:4") {
		t.Fatalf("the reload error does not say file:line:\n%s", p.logs())
	}
	code, body, _ := get("http://" + p.admin + "/metrics")
	if code != 200 || !strings.Contains(body, `floodgate_config_reloads_total{result="failure"} 1`) ||
		!strings.Contains(body, `floodgate_config_reloads_total{result="success"} 1`) {
		t.Fatalf("reload metrics: %d\n%s", code, grep(body, "config_reloads"))
	}
}

// configPath returns the config file start wrote for p.
func configPath(t *testing.T, p *proc) string {
	t.Helper()
	for i, a := range p.cmd.Args {
		if a == "--config" && i+1 < len(p.cmd.Args) {
			return filepath.Clean(p.cmd.Args[i+1])
		}
	}
	t.Fatal("no --config argument")
	return ""
}

func grep(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dayLimit is a configuration of domain whose rule r allows n a day on
// the key k.
func dayLimit(domain string, n int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {name: r, unit: day, requests_per_unit: %d}\n", domain, n)
}

// currentLimit is the current_limit of an OK decision on domain's
// k=value, asked of p through rls; anything else ends the test.
func currentLimit(t *testing.T, p *proc, rls rlsv3.RateLimitServiceClient, domain, value string) uint32 {
	t.Helper()
	resp, err := rls.ShouldRateLimit(t.Context(), request(domain, "k", value))
	if err != nil {
		t.Fatalf("%s: %v\n%s", value, err, p.logs())
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("%s: %v", value, resp)
	}
	return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
}

// waitLogCount waits until p's log says want n times, for up to 10 s; the
// process exiting first ends the test.
func waitLogCount(t *testing.T, p *proc, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.logs(), want) < n {
		select {
		case <-p.done:
			t.Fatalf("the process exited (%v) waiting for %q\n%s", p.exitErr(), want, p.logs())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %q %d times within 10s\n%s", want, n, p.logs())
		}
		time.Sleep(20 * time.Millisecond) // polling a real process
	}
}
