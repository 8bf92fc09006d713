package e2e

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/testserver"
)

func rlsClient(t *testing.T, addr string) (rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn), conn
}

func request(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}}
}

// TestDrainOnSignal: SIGTERM and SIGINT stop the server with exit code 0
// after the requests in flight are answered; health turns NOT_SERVING.
func TestDrainOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			domain := uniqueDomain("drain")
			p := start(t, exactConfig(domain))
			rls, conn := rlsClient(t, p.grpc)
			hc := healthpb.NewHealthClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
			if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health before the signal: %v %v", h, err)
			}
			if code, body, err := get("http://" + p.admin + "/readyz"); code != 200 {
				t.Fatalf("readyz: %d %s %v", code, body, err)
			}
			// Callers keep sending while the signal arrives: every call
			// either gets an answer or fails to connect, none hangs.
			var answered, failed atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
						_, err := rls.ShouldRateLimit(cctx, request(domain, "client", "drain"))
						ccancel()
						if err != nil {
							failed.Add(1)
							time.Sleep(10 * time.Millisecond)
						} else {
							answered.Add(1)
						}
					}
				}()
			}
			time.Sleep(300 * time.Millisecond) // some load before the signal; not a timing assertion
			start := time.Now()
			if err := p.stop(sig, 15*time.Second); err != nil {
				t.Fatalf("exit after %v: %v, want exit code 0\n%s", sig, err, p.logs())
			}
			close(stop)
			wg.Wait()
			if answered.Load() == 0 {
				t.Fatal("no call was answered")
			}
			if !strings.Contains(p.logs(), "floodgate stopped") {
				t.Fatalf("no drain log line:\n%s", p.logs())
			}
			t.Logf("%v: exit 0 after %v; %d calls answered, %d refused once the listener closed", sig, time.Since(start), answered.Load(), failed.Load())
		})
	}
}

// TestReadyzFollowsTheStore: /readyz is 503 once the store has been down
// for 3 pings and 200 again when it is back.
func TestReadyzFollowsTheStore(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		return
	}
	p := start(t, exactConfig(uniqueDomain("readyz")), "--store", "redis://"+srv.Addr)
	if code, body, _ := get("http://" + p.admin + "/readyz"); code != 200 {
		t.Fatalf("readyz with the store up: %d %s", code, body)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// Readiness turns 503 after 3 failed pings in a row (each /readyz
	// pings, and so does a check every second), so that one slow ping
	// does not take the instance out of service: ask until it does,
	// within 5 s.
	var code int
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body, _ = get("http://" + p.admin + "/readyz")
		if code == 503 || time.Now().After(deadline) {
			break
		}
	}
	if code != 503 || !strings.Contains(body, "store") {
		t.Fatalf("readyz with the store down for 5 s: %d %s", code, body)
	}
	if code, body, _ := get("http://" + p.admin + "/healthz"); code != 200 {
		t.Fatalf("healthz with the store down: %d %s (the process is alive)", code, body)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body, _ := get("http://" + p.admin + "/readyz")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %d %s 5s after the store came back", code, body)
		}
		time.Sleep(100 * time.Millisecond) // polling a real process
	}
}
