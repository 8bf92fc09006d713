package redis_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
)

// TestOpenNotRedis: a redis:// URL pointed at another server (a port
// mixed up) fails with a hint of what the server seems to be, from its
// reply, not only the client's "received unknown message type: 69": a
// memcached (its "ERROR" to Redis's HELLO) is pointed to memcached://; an
// HTTP server is named as one, without the memcached hint it got; any
// other is said not to speak Redis's protocol.
func TestOpenNotRedis(t *testing.T) {
	open := func(t *testing.T, addr string) error {
		t.Helper()
		s, err := redis.Open("redis://"+addr, redis.WithTimeout(2*time.Second))
		if err == nil {
			s.Close()
			t.Fatalf("redis.Open of %s succeeded", addr)
		}
		t.Logf("Open: %v", err)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("redis.Open: %v, want store.ErrUnavailable", err)
		}
		if errors.Is(err, redis.ErrTLSMismatch) {
			t.Errorf("redis.Open: %v wraps redis.ErrTLSMismatch; the server is no Redis, TLS or not", err)
		}
		return err
	}
	t.Run("memcached", func(t *testing.T) {
		addr := testserver.Memcached(t)
		if addr == "" {
			return
		}
		err := open(t, addr)
		if !strings.Contains(err.Error(), "is it a memcached? its reply 'ERROR' is memcached's protocol") || !strings.Contains(err.Error(), "memcached://") {
			t.Errorf("redis.Open of a memcached: %v; want a hint that it is a memcached", err)
		}
	})
	t.Run("http", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		defer srv.Close()
		err := open(t, srv.Listener.Addr().String())
		if !strings.Contains(err.Error(), "is it an HTTP server? its reply 'HTTP/1.1 400 Bad Request' is HTTP") || strings.Contains(err.Error(), "memcached") {
			t.Errorf("redis.Open of an HTTP server: %v; want a hint that it is an HTTP server, not a memcached", err)
		}
	})
	t.Run("other", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for { // until ln.Close
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
				c.Close()
			}
		}()
		defer func() { ln.Close(); <-done }()
		err = open(t, ln.Addr().String())
		if !strings.Contains(err.Error(), "is it a Redis server? its reply is not Redis's protocol") ||
			strings.Contains(err.Error(), "memcached") || strings.Contains(err.Error(), "HTTP") {
			t.Errorf("redis.Open of an SSH-like server: %v; want the generic hint only", err)
		}
	})
}
