package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/server"
	"github.com/floodgate/floodgate/store/memory"
)

type clock struct{ us atomic.Int64 }

func (c *clock) Now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *clock) Advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }

// env is a server on a memory store with a fake clock, its HTTP and admin
// handlers behind httptest servers and its gRPC service on a loopback port.
type env struct {
	srv   *server.Server
	eng   *policy.Engine
	clock *clock
	http  *httptest.Server
	admin *httptest.Server
	rls   rlsv3.RateLimitServiceClient
	conn  *grpc.ClientConn
}

func newEnv(t *testing.T, opts ...server.Option) *env {
	t.Helper()
	cfg, err := policy.Load("testdata/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return newEnvFor(t, cfg, opts...)
}

// newEnvFor is newEnv on the configuration cfg.
func newEnvFor(t *testing.T, cfg *policy.Config, opts ...server.Option) *env {
	t.Helper()
	return newEnvWith(t, cfg, nil, opts...)
}

// newEnvWith is newEnvFor with the engine's options engOpts too.
func newEnvWith(t *testing.T, cfg *policy.Config, engOpts []policy.Option, opts ...server.Option) *env {
	t.Helper()
	c := &clock{}
	c.us.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro())
	st, err := memory.New(memory.WithClock(c.Now), memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := policy.NewEngine(cfg, st, append([]policy.Option{policy.WithClock(c.Now)}, engOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: srv, eng: eng, clock: c}
	e.http = httptest.NewServer(srv.HTTPHandler())
	e.admin = httptest.NewServer(srv.AdminHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPCServer().Serve(ln)
	e.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.rls = rlsv3.NewRateLimitServiceClient(e.conn)
	t.Cleanup(func() {
		e.conn.Close()
		srv.GRPCServer().Stop()
		e.http.Close()
		e.admin.Close()
	})
	return e
}

// do sends a request and returns the status and body.
func do(t *testing.T, method, url, contentType string, body []byte, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}

func postJSON(t *testing.T, url string, v any) (int, []byte, http.Header) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, "POST", url, "application/json", b)
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) map[string]any {
	var entries []map[string]string
	for i := 0; i+1 < len(kv); i += 2 {
		entries = append(entries, map[string]string{"key": kv[i], "value": kv[i+1]})
	}
	return map[string]any{"entries": entries}
}

// serverFor returns a server for the configuration yaml on a fresh memory
// store (no janitor), closed with the test.
func serverFor(t *testing.T, yaml string, opts ...server.Option) *server.Server {
	t.Helper()
	cfg, err := policy.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(eng, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// serve runs srv.Serve on ls until the test's end, when it stops it and
// fails the test on Serve's error.
func serve(t *testing.T, srv *server.Server, ls server.Listeners) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ls) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}
