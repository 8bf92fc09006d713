package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/testserver"
)

// call is one request of the outage load.
type call struct {
	at      time.Duration // since the load started
	latency time.Duration
	key     string
	ok      bool
	err     error
}

const (
	outageLimit     = 2000 // per key per hour
	outageInstances = 4
	outageShare     = outageLimit / outageInstances // FailLocal's bound per key
)

// TestStoreOutage kills redis-server by PID during a bounded 64-caller
// load, keeps it down 3 s and restarts it, for each failure policy: every
// call is answered within 200 ms while the store is down, according to the
// policy; the server is ready again within 5 s of the store's return; under
// local no key admits more than its share limit ÷ instances while down.
func TestStoreOutage(t *testing.T) {
	for _, policy := range []string{"open", "closed", "local"} {
		t.Run(policy, func(t *testing.T) { outage(t, policy) })
	}
}

// serverSlow scrapes the server's gRPC request latency histogram: the
// requests answered in over 200 ms, and all of them.
func serverSlow(t *testing.T, p *proc) (slow, total int64) {
	t.Helper()
	code, body, err := get("http://" + p.admin + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("scraping /metrics: %d %v", code, err)
	}
	var le200 int64 = -1
	for _, l := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(l, `floodgate_request_duration_seconds_bucket{transport="grpc",le="0.2"} `):
			le200, _ = strconv.ParseInt(strings.Fields(l)[1], 10, 64)
		case strings.HasPrefix(l, `floodgate_request_duration_seconds_count{transport="grpc"} `):
			total, _ = strconv.ParseInt(strings.Fields(l)[1], 10, 64)
		}
	}
	if le200 < 0 {
		t.Fatalf("no 0.2s bucket in the gRPC latency histogram:\n%s", grep(body, "request_duration"))
	}
	return total - le200, total
}

func outage(t *testing.T, policy string) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	domain := uniqueDomain("outage")
	cfg := fmt.Sprintf(`
domain: %s
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, algorithm: sliding_log, unit: hour, requests_per_unit: %d}
`, domain, outageLimit)
	p := start(t, cfg, "--store", "redis://"+srv.Addr, "--on-store-error", policy,
		"--instances", fmt.Sprint(outageInstances), "--store-timeout", "50ms")

	const callers, conns = 64, 4
	clients := make([]rlsv3.RateLimitServiceClient, conns)
	for i := range clients {
		clients[i], _ = rlsClient(t, p.grpc)
	}
	var mu sync.Mutex
	var calls []call
	begin := time.Now()
	end := begin.Add(12 * time.Second) // the load's bound; it stops earlier once recovery is seen
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("t%d", g%4)
			rls := clients[g%conns]
			var mine []call
			defer func() {
				mu.Lock()
				calls = append(calls, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(end) {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				resp, err := rls.ShouldRateLimit(ctx, request(domain, "tenant", key))
				cancel()
				c := call{at: t0.Sub(begin), latency: time.Since(t0), key: key, err: err}
				c.ok = err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK
				mine = append(mine, c)
				time.Sleep(40 * time.Millisecond) // pace: about 1600 calls/s in all
			}
		}()
	}

	time.Sleep(time.Second) // load against a healthy store first
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	killAt := time.Since(begin) // Kill returns once the process is gone
	slowBefore, totalBefore := serverSlow(t, p)
	time.Sleep(3 * time.Second) // the outage
	// Calls between restartAt and backAt may meet the store on its way up:
	// they belong to neither the outage nor the recovery.
	restartAt := time.Since(begin)
	slowAfter, totalAfter := serverSlow(t, p)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	backAt := time.Since(begin)
	var readyAfter time.Duration = -1
	for time.Since(begin) < backAt+5*time.Second {
		if code, _, _ := get("http://" + p.admin + "/readyz"); code == 200 {
			readyAfter = time.Since(begin) - backAt
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a real process
	}
	time.Sleep(time.Second) // some load against the recovered store
	close(stop)
	wg.Wait()

	if readyAfter < 0 {
		t.Fatalf("%s: not ready 5s after the store came back\n%s", policy, p.logs())
	}
	var down []call
	var errs int
	admittedDown := map[string]int{}
	for _, c := range calls {
		if c.err != nil {
			errs++
			if errs <= 3 {
				t.Errorf("%s: call at %v failed: %v", policy, c.at, c.err)
			}
		}
		if c.at >= killAt && c.at < restartAt {
			down = append(down, c)
			if c.ok {
				admittedDown[c.key]++
			}
		}
	}
	if errs > 0 {
		t.Fatalf("%s: %d of %d calls got an error instead of an answer", policy, errs, len(calls))
	}
	if len(down) < 1000 {
		t.Fatalf("%s: only %d calls during the outage", policy, len(down))
	}
	// Every call during the outage is answered within 200 ms as the server
	// measures it (floodgate_request_duration_seconds); as the callers
	// measure it, the test machine's own scheduling adds to it, so the
	// client-side bound is looser.
	if slow := slowAfter - slowBefore; slow > 0 {
		t.Fatalf("%s: the server took over 200ms to answer %d of the %d calls during the outage", policy, slow, totalAfter-totalBefore)
	}
	if totalAfter-totalBefore < 1000 {
		t.Fatalf("%s: the server answered only %d calls during the outage", policy, totalAfter-totalBefore)
	}
	sort.Slice(down, func(i, j int) bool { return down[i].latency > down[j].latency })
	if worst := down[0].latency; worst > time.Second {
		var slow []string
		for _, c := range down[:min(10, len(down))] {
			slow = append(slow, fmt.Sprintf("%v at %v", c.latency.Round(time.Millisecond), c.at.Round(time.Millisecond)))
		}
		t.Fatalf("%s: a call during the outage took %v as its caller saw it; slowest: %v", policy, worst, slow)
	}
	// After-recovery answers come from the store: at least one admitted
	// call after the server was ready again.
	var okAfter int
	for _, c := range calls {
		if c.at > backAt+readyAfter && c.ok {
			okAfter++
		}
	}
	total := 0
	for _, n := range admittedDown {
		total += n
	}
	switch policy {
	case "open":
		if total != len(down) {
			t.Fatalf("open: %d of %d calls admitted during the outage, want all", total, len(down))
		}
	case "closed":
		if total != 0 {
			t.Fatalf("closed: %d calls admitted during the outage, want none", total)
		}
	case "local":
		for _, key := range []string{"t0", "t1", "t2", "t3"} {
			if n := admittedDown[key]; n == 0 || n > outageShare {
				t.Fatalf("local: key %s admitted %d during the outage, want between 1 and its share %d (= %d ÷ %d instances)",
					key, n, outageShare, outageLimit, outageInstances)
			}
		}
	}
	if okAfter == 0 {
		t.Fatalf("%s: no call admitted after recovery", policy)
	}
	t.Logf("%s: %d calls, %d during the 3s outage (none over 200ms at the server, slowest %v at the caller, %d admitted), ready %v after the store came back",
		policy, len(calls), len(down), down[0].latency, total, readyAfter)
}
