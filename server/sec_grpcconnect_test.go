package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/server"
)

// TestSecGRPCHandshakeTimeout: a connection to the gRPC listener that
// sends nothing — no TLS ClientHello, or after TLS no HTTP/2 preface — is
// closed once the connection timeout passes (10 s in serve, as the HTTP
// listeners' header timeout; 300 ms here). grpc-go's default held it, and
// its goroutine, for 120 s.
func TestSecGRPCHandshakeTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const bound = 3 * time.Second // the close must come well before this
	defer server.SetGRPCConnectionTimeout(timeout)()
	for _, tc := range []struct {
		name string
		tls  bool
		dial func(addr string) (net.Conn, error)
	}{
		{"plaintext, nothing sent", false, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
		{"TLS, no ClientHello", true, func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
		{"TLS done, no HTTP/2 preface", true, func(addr string) (net.Conn, error) {
			c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
			if err != nil {
				return nil, err
			}
			return c, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []server.Option
			if tc.tls {
				opts = append(opts, server.WithGRPCCredentials(credentials.NewTLS(selfSigned(t))))
			}
			srv := serverFor(t, releaseConfig, append(opts, server.WithDrainTimeout(time.Second))...)
			ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ctx, ls) }()
			defer func() { stop(); <-served }()
			c, err := tc.dial(ls.GRPC.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			c.SetReadDeadline(start.Add(bound))
			buf := make([]byte, 4096)
			for {
				// A server's frames (SETTINGS after TLS) may come first;
				// the close is what is waited for.
				if _, err = c.Read(buf); err != nil {
					break
				}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the connection was still open %v after it was made (connection timeout %v)", bound, timeout)
			}
			if took := time.Since(start); took < timeout/2 {
				t.Errorf("closed after %v, before the connection timeout %v: %v", took, timeout, err)
			}
		})
	}
}

// TestSecGRPCHandshakeTimeoutSparesOpenConnections: the timeout bounds the
// handshake only: a client's connection that completed it stays open past
// the timeout between its calls (one dial for calls three timeouts apart).
func TestSecGRPCHandshakeTimeoutSparesOpenConnections(t *testing.T) {
	const timeout = 200 * time.Millisecond
	defer server.SetGRPCConnectionTimeout(timeout)()
	e := newEnv(t)
	c := newWatchedClient(t, e.conn.Target())
	c.call(t)
	select {
	case <-c.first().ended:
		t.Fatalf("the connection ended after the handshake, within %v", 3*timeout)
	case <-time.After(3 * timeout):
	}
	c.call(t)
	if n := c.dials.Load(); n != 1 {
		t.Errorf("%d dials for two calls %v apart, want 1 (an open connection outlives the connection timeout)", n, 3*timeout)
	}
}
