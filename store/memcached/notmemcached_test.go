package memcached_test

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// lineServer listens on 127.0.0.1 and answers the first line of every
// connection with reply, then closes it: a server of another kind whose
// reply Open cannot take for memcached's.
func lineServer(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				c.Write([]byte(reply))
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestOpenNotMemcached: memcached:// at a server of another kind says
// what the server seems to be, as redis:// at a memcached does. A Redis
// (redis-server 7 answers stats settings "-ERR unknown command 'stats',
// with args beginning with: 'settings'") is named with redis:// as the
// URL to use, an HTTP server as HTTP; any other reply keeps the generic
// error, which quotes it. Before, every one said only `unexpected answer
// to stats settings: "-ERR unknown command…"`. The URL is quoted in every
// case.
func TestOpenNotMemcached(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	const redisHint = "is it a Redis server? its reply '-ERR unknown command"
	cases := []struct {
		name, addr string
		want       []string
		wantNot    []string
	}{
		{"redis-server", testserver.Redis(t),
			[]string{redisHint, "is Redis's protocol, not memcached's; redis:// is the URL of a Redis server"}, nil},
		{"RESP simple string", lineServer(t, "+OK\r\n"),
			[]string{"is it a Redis server? its reply '+OK' is Redis's protocol", "redis://"}, nil},
		{"RESP3 map", lineServer(t, "%1\r\n"),
			[]string{"is it a Redis server? its reply '%1' is Redis's protocol", "redis://"}, nil},
		{"HTTP", strings.TrimPrefix(web.URL, "http://"),
			[]string{"is it an HTTP server? its reply 'HTTP/1.1 400 Bad Request' is HTTP, not memcached's protocol"},
			[]string{"Redis", "redis://"}},
		{"other", lineServer(t, "hello there\r\n"),
			[]string{`unexpected answer to stats settings: "hello there"`},
			[]string{"is it", "Redis", "redis://", "HTTP"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw := "memcached://" + tc.addr
			s, err := memcached.Open(raw, memcached.WithTimeout(5*time.Second))
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", raw)
			}
			msg := err.Error()
			for _, w := range append(tc.want, "server "+tc.addr+": unexpected answer to stats settings", `(store URL "`+raw+`")`) {
				if !strings.Contains(msg, w) {
					t.Errorf("Open(%q) = %v, want it to say %s", raw, err, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(msg, w) {
					t.Errorf("Open(%q) = %v, want no %q in it", raw, err, w)
				}
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("Open(%q) = %q, want one line", raw, msg)
			}
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Open(%q) = %v, want it to wrap store.ErrUnavailable as before", raw, err)
			}
		})
	}
}
