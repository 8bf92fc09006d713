package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/loadgen"
)

// exactConfig is a 1000-per-hour descriptor. It is a sliding log so that no
// window boundary can fall inside the test (a fixed window would reset on
// the hour).
func exactConfig(domain string) string {
	return fmt.Sprintf(`
domain: %s
descriptors:
  - key: client
    rate_limit: {name: hourly, algorithm: sliding_log, unit: hour, requests_per_unit: 1000}
  - key: window
    rate_limit: {name: hourly-window, unit: hour, requests_per_unit: 1000}
`, domain)
}

// TestExactEndToEnd: through the real binary, 4 client connections × 2
// goroutines send 1200 single-hit requests at a 1000-per-hour descriptor:
// exactly 1000 are admitted, on every store (Sentinel too) and over every
// protocol.
func TestExactEndToEnd(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"memory":    func(*testing.T) string { return "memory://" },
		"redis":     func(t *testing.T) string { return "redis://" + testserver.Redis(t) },
		"cluster":   func(t *testing.T) string { return "redis-cluster://" + strings.Join(testserver.RedisCluster(t), ",") },
		"memcached": func(t *testing.T) string { return "memcached://" + testserver.Memcached(t) },
		"sentinel": func(t *testing.T) string {
			master, sentinels := testserver.RedisSentinel(t)
			return "redis-sentinel://" + master + "@" + strings.Join(sentinels, ",")
		},
	}
	for _, name := range []string{"memory", "redis", "cluster", "memcached", "sentinel"} {
		t.Run(name, func(t *testing.T) {
			url := stores[name](t)
			domain := uniqueDomain(name)
			// A generous store timeout: this test is about the decisions, not the
			// failure policy (a timeout under "closed" would refuse, under "open" admit).
			p := start(t, exactConfig(domain), "--store", url, "--on-store-error", "closed", "--store-timeout", "10s")
			for _, proto := range []string{loadgen.GRPC, loadgen.JSON, loadgen.V1} {
				addr := p.http
				if proto == loadgen.GRPC {
					addr = p.grpc
				}
				res, err := loadgen.Run(context.Background(), loadgen.Config{
					Protocol: proto, Addr: addr, Domain: domain,
					Descriptors: [][]loadgen.Entry{{{Key: "client", Value: proto}}},
					Requests:    1200, Duration: 2 * time.Minute, Concurrency: 8, Connections: 4,
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.Admitted != 1000 || res.Rejected != 200 || res.Errors != 0 {
					t.Fatalf("%s over %s: admitted %d, rejected %d, errors %d %v; want exactly 1000 and 200\n%s",
						name, proto, res.Admitted, res.Rejected, res.Errors, res.FirstErrors, p.logs())
				}
			}
		})
	}
}
