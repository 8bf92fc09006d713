package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
)

// TestStalledStoreLogs: a Redis that stops answering (SIGSTOP, as a
// blackholed network) under load for several cool-downs: the breaker's
// lines are bounded by their cause — it re-opens every second, logged
// only when the cause changes — and no line names a key, which holds the
// callers' descriptor values (an address, an API key). Before, each
// re-opening was logged with the key its probe was about.
func TestStalledStoreLogs(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	domain := uniqueDomain("stall")
	cfg := fmt.Sprintf("domain: %s\ndescriptors:\n  - key: client\n    rate_limit: {name: per-client, unit: second, requests_per_unit: 5}\n", domain)
	p := start(t, cfg, "--store", "redis://"+srv.Addr, "--store-timeout", "50ms")
	rls, _ := rlsClient(t, p.grpc)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				rls.ShouldRateLimit(ctx, request(domain, "client", fmt.Sprintf("secret-%d-%d", g, i%500)))
				cancel()
				time.Sleep(5 * time.Millisecond) // pace the load
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if err := srv.Pause(); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	time.Sleep(7 * time.Second) // seven cool-downs of the breaker
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()

	logs := p.logs()
	var breaker []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "store circuit breaker") {
			breaker = append(breaker, l)
		}
	}
	if len(breaker) == 0 || len(breaker) > 2 {
		t.Errorf("%d breaker lines during a 7s stall, want 1 (2 at most: a timeout, then maybe another cause):\n%s", len(breaker), logs)
	}
	causes := map[string]bool{}
	last := regexp.MustCompile(`; last: (.*?)" event=`)
	for _, l := range breaker {
		if m := last.FindStringSubmatch(l); m != nil {
			if causes[m[1]] {
				t.Errorf("the cause %q logged twice:\n%s", m[1], strings.Join(breaker, "\n"))
			}
			causes[m[1]] = true
		}
	}
	if strings.Contains(logs, "secret-") || strings.Contains(logs, "client=") {
		t.Errorf("a descriptor value in the log:\n%s", logs)
	}
}
