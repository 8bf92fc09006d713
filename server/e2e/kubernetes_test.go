package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestShutdownDelay: with --shutdown-delay, SIGTERM first turns /readyz
// to 503 and the gRPC health to NOT_SERVING while every listener keeps
// serving (new connections too, /healthz still 200), and the drain and the
// exit come only after the delay: Kubernetes endpoints and Envoy stop
// routing here before the listeners close.
func TestShutdownDelay(t *testing.T) {
	domain := uniqueDomain("delay")
	const delay = 1500 * time.Millisecond
	p := start(t, exactConfig(domain), "--shutdown-delay", delay.String())
	rls, conn := rlsClient(t, p.grpc)
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rls.ShouldRateLimit(ctx, request(domain, "k", "before")); err != nil {
		t.Fatal(err)
	}
	sigAt := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		code, body, _ := get("http://" + p.admin + "/readyz")
		h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if code == 503 && strings.Contains(body, "not ready: shutting down") && err == nil && h.Status == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("1s after SIGTERM: readyz %d %s, health %v %v; want 503 shutting down and NOT_SERVING\n%s", code, body, h, err, p.logs())
		}
		time.Sleep(20 * time.Millisecond) // polling a real process
	}
	// Still serving, on open and new connections alike.
	if resp, err := rls.ShouldRateLimit(ctx, request(domain, "k", "during")); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("gRPC during the delay: %v %v", resp, err)
	}
	rls2, _ := rlsClient(t, p.grpc)
	if _, err := rls2.ShouldRateLimit(ctx, request(domain, "k", "new-conn")); err != nil {
		t.Errorf("gRPC on a new connection during the delay: %v", err)
	}
	// --http still decides; its /healthcheck, a readiness probe too, says
	// shutting down, as /readyz does.
	if code, _, got := post(t, "http://"+p.http+"/json", `{"domain":"`+domain+`","descriptors":[{"entries":[{"key":"client","value":"during-json"}]}]}`); code != 200 {
		t.Errorf("--http /json during the delay: %d %s, want 200", code, got)
	}
	if code, body, err := get("http://" + p.http + "/healthcheck"); code != 503 || !strings.Contains(body, "shutting down") {
		t.Errorf("--http /healthcheck during the delay: %d %s %v, want 503 shutting down", code, body, err)
	}
	if code, _, err := get("http://" + p.admin + "/healthz"); code != 200 {
		t.Errorf("/healthz during the delay: %d %v, want 200 (the process is alive)", code, err)
	}
	select {
	case <-p.done:
		t.Fatalf("exited %v after SIGTERM, before the %v delay\n%s", time.Since(sigAt), delay, p.logs())
	case <-time.After(delay - time.Since(sigAt) - 200*time.Millisecond):
	}
	select {
	case <-p.done:
		if err := p.exitErr(); err != nil {
			t.Fatalf("exit: %v\n%s", err, p.logs())
		}
		if took := time.Since(sigAt); took < delay {
			t.Errorf("exited %v after SIGTERM, want at least the %v delay", took, delay)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after the delay\n%s", p.logs())
	}
	if !strings.Contains(p.logs(), "shutting down: reporting not ready and still serving for 1.5s") {
		t.Errorf("no log line for the delay\n%s", p.logs())
	}
}

// TestGRPCMaxConnectionAge: with --grpc-max-connection-age, the server
// ends a gRPC connection after that age (GOAWAY), so that a client such
// as Envoy reconnects, and spreads over the instances a scale-out added.
// TestSecondSignalStopsAtOnce: a second SIGTERM during the shutdown delay
// (an operator's second Ctrl-C, a supervisor that insists) stops the
// process at once instead of waiting out the delay and the drain.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	domain := uniqueDomain("second")
	p := start(t, exactConfig(domain), "--shutdown-delay", "30s")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(p.logs(), "shutting down: reporting not ready") {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown-delay log line 5s after SIGTERM\n%s", p.logs())
		}
		time.Sleep(20 * time.Millisecond) // polling a real process
	}
	secondAt := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if took := time.Since(secondAt); took > 5*time.Second {
			t.Errorf("exited %v after the second SIGTERM", took)
		}
		// Killed by the signal's default action, not drained.
		if err := p.exitErr(); err == nil || !strings.Contains(err.Error(), "signal: terminated") {
			t.Errorf("exit %v, want killed by the second SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after a second SIGTERM (the delay is 30s)\n%s", p.logs())
	}
}

func TestGRPCMaxConnectionAge(t *testing.T) {
	domain := uniqueDomain("age")
	p := start(t, exactConfig(domain), "--grpc-max-connection-age", "500ms", "--grpc-max-connection-age-grace", "1s")
	rls, conn := rlsClient(t, p.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rls.ShouldRateLimit(ctx, request(domain, "k", "v")); err != nil {
		t.Fatal(err)
	}
	if s := conn.GetState(); s != connectivity.Ready {
		t.Fatalf("state %v after a call, want READY", s)
	}
	if !conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatalf("the connection is still READY 5s on, want it ended after about 500ms\n%s", p.logs())
	}
	// The client reconnects and calls go on.
	if _, err := rls.ShouldRateLimit(ctx, request(domain, "k", "v")); err != nil {
		t.Fatalf("a call after the connection aged out: %v", err)
	}
}
