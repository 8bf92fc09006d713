package server_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/server"
)

// A gRPC health Watch (grpc-go's and grpc-java's client-side health
// checking hold one per connection) is a call in flight that never ends on
// its own: GracefulStop waited for it, so with one client watching every
// drain ran to --drain-timeout, cut the connection and logged "drain timed
// out … 0 gRPC decision call(s) (and any other gRPC streams)". The drain
// now ends each watch once it has told the client NOT_SERVING (a watch of
// a name the server does not serve, once the drain begins): the client
// reads the NOT_SERVING, then the end of the stream, and the drain is over
// at once. With a shutdown delay the watches are told NOT_SERVING at its
// start and go on until the drain.
func TestDrainEndsHealthWatches(t *testing.T) {
	for _, delay := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run("shutdown-delay="+delay.String(), func(t *testing.T) { testDrainEndsHealthWatches(t, delay) })
	}
}

func testDrainEndsHealthWatches(t *testing.T, delay time.Duration) {
	const drain = 5 * time.Second
	srv := serverFor(t, compatConfig, server.WithDrainTimeout(drain), server.WithShutdownDelay(delay))
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()
	conn, err := grpc.NewClient(ls.GRPC.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	// Longer than the drain timeout: the client does not end the watches.
	wctx, stopWatching := context.WithTimeout(context.Background(), 3*drain)
	defer stopWatching()
	names := []string{"", server.HealthServiceName, "no.such.Service"}
	watches := make([]healthpb.Health_WatchClient, len(names))
	for i, name := range names {
		if watches[i], err = hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: name}); err != nil {
			t.Fatal(err)
		}
		want := healthpb.HealthCheckResponse_SERVING
		if name == "no.such.Service" {
			want = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		}
		for {
			r, err := watches[i].Recv()
			if err != nil {
				t.Fatalf("watch %q: %v, want %v", name, err, want)
			}
			if r.Status == want {
				break
			}
		}
	}

	start := time.Now()
	stop() // the drain
	for i, name := range names {
		if name != "no.such.Service" {
			if r, err := watches[i].Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Errorf("watch %q once draining: %v %v, want NOT_SERVING", name, r, err)
				continue
			}
		}
		r, err := watches[i].Recv()
		if !errors.Is(err, io.EOF) {
			t.Errorf("watch %q after NOT_SERVING: %v %v after %v, want the end of the stream (io.EOF) from the drain", name, r, err, time.Since(start).Round(time.Millisecond))
		} else if took := time.Since(start); took < delay {
			t.Errorf("watch %q ended %v after the signal, during the shutdown delay %v, want it to go on until the drain", name, took, delay)
		}
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * drain):
		t.Fatal("Serve did not return")
	}
	if took := time.Since(start); took >= delay+drain/2 {
		t.Errorf("the drain took %v with health watches open, want well under the drain timeout %v", took.Round(time.Millisecond), drain)
	}
	for _, e := range srv.Events() {
		if strings.Contains(e.Message, "drain timed out") {
			t.Errorf("event %q: the watches held the drain to its timeout", e.Message)
		}
	}
}
