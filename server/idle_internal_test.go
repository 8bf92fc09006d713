package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

// TestIdleConnectionsClosed: a keep-alive connection that sends nothing
// more is closed after the idle timeout on the admin address as on the
// HTTP one. The admin listener had none: a client could hold as many idle
// connections, and their goroutines, as it liked.
func TestIdleConnectionsClosed(t *testing.T) {
	old := idleTimeout
	idleTimeout = 200 * time.Millisecond
	t.Cleanup(func() { idleTimeout = old })
	cfg, err := policy.Parse("t.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memory.New()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng, err := policy.NewEngine(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(eng, st)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ls) }()
	defer func() { cancel(); <-done }()
	for name, addr := range map[string]string{"admin": ls.Admin.Addr().String(), "http": ls.HTTP.Addr().String()} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err = r.ReadByte()
		if !errors.Is(err, io.EOF) {
			t.Errorf("%s: an idle keep-alive connection: read %v after %v, want EOF (closed after the idle timeout)", name, err, time.Since(start).Round(time.Millisecond))
		}
	}
}
