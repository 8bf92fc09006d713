package memcached_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/storetest"
)

// tlsServer starts a memcached speaking TLS only, with a certificate of a
// CA made for it; nil when memcached is missing (skipped).
func tlsServer(t *testing.T, extra ...string) (*testserver.Server, *testserver.TLSFiles) {
	t.Helper()
	srv, files := testserver.NewMemcachedTLS(t, extra...)
	if srv == nil {
		t.Skip("no memcached")
	}
	return srv, files
}

// TestTLSConformance: memcacheds:// with WithTLS trusting the test CA
// passes the store conformance suite against a memcached -Z.
func TestTLSConformance(t *testing.T) {
	srv, files := tlsServer(t)
	storetest.Run(t, storetest.Harness{
		New: func(tb testing.TB, clock func() time.Time) store.Store {
			opts := []memcached.Option{memcached.WithTimeout(5 * time.Second), memcached.WithTLS(&tls.Config{RootCAs: files.Roots})}
			if clock != nil {
				opts = append(opts, memcached.WithClock(clock))
			}
			st, err := memcached.Open("memcacheds://"+srv.Addr, opts...)
			if err != nil {
				tb.Fatal(err)
			}
			return st
		},
	})
}

// memcachedStat reads one general statistic of the TLS memcached at addr.
func memcachedStat(t *testing.T, addr string, files *testserver.TLSFiles, name string) int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: files.Roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "stats\r\n")
	r := bufio.NewReader(c)
	for range 200 {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "STAT "+name+" "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no stat %s", name)
	return 0
}

// TestTLSRing: a ring of two TLS servers, one named by its IP address and
// one by localhost (each verified against its own host), decides exactly
// over one and several keys (pipelined), and reuses its connections: the
// check of a pooled connection (conn.go) looks at the TLS connection's
// socket and finds nothing there between an answer and the next request,
// so sequential decisions open no new connection each.
func TestTLSRing(t *testing.T) {
	a, files := tlsServer(t)
	b := testserver.NewMemcachedTLSWith(t, files)
	url := "memcacheds://" + a.Addr + ",localhost:" + strconv.Itoa(b.Port)
	clock := newClock(t0)
	s, err := memcached.Open(url, memcached.WithTLS(&tls.Config{RootCAs: files.Roots}),
		memcached.WithClock(clock.Now), memcached.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("Open(%q): %v", url, err)
	}
	defer s.Close()
	c := ctx(t)
	l := compile(t, algo.Params{Algorithm: algo.GCRA, Limit: 5, Period: time.Minute, Burst: 5})
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = uniqueKey(t, "k"+itoa(i))
	}
	out := make([]algo.Decision, 1)
	// Warm the pools, then count the connections the servers accepted.
	if _, err := s.Take(c, []store.Request{{Key: keys[0], Limit: l, Cost: 1}}, out); err != nil {
		t.Fatal(err)
	}
	before := memcachedStat(t, a.Addr, files, "total_connections") + memcachedStat(t, b.Addr, files, "total_connections")
	for _, k := range keys[1:] {
		for i := range 6 {
			if _, err := s.Take(c, []store.Request{{Key: k, Limit: l, Cost: 1}}, out); err != nil {
				t.Fatalf("Take %s #%d: %v", k, i+1, err)
			}
			if want := i < 5; out[0].Allowed != want {
				t.Fatalf("Take %s #%d: %+v, want allowed %v", k, i+1, out[0], want)
			}
		}
	}
	servers := map[string]bool{}
	for _, k := range keys {
		servers[s.ServerFor(k)] = true
	}
	if len(servers) != 2 {
		t.Fatalf("keys on %v, want both servers", servers)
	}
	// Several keys, on both servers, all or nothing: keys[0] has 4 left.
	reqs := make([]store.Request, 0, len(keys))
	reqs = append(reqs, store.Request{Key: keys[0], Limit: l, Cost: 4})
	fresh := uniqueKey(t, "fresh")
	reqs = append(reqs, store.Request{Key: fresh, Limit: l, Cost: 1})
	outs := make([]algo.Decision, len(reqs))
	res, err := s.Take(c, reqs, outs)
	if err != nil || !res.Allowed {
		t.Fatalf("multi-key Take: %+v, %v; want allowed", res, err)
	}
	after := memcachedStat(t, a.Addr, files, "total_connections") + memcachedStat(t, b.Addr, files, "total_connections")
	// Each stat read is a connection of its own (2), the pipes of the
	// multi-key Take one per server (2); the 42 sequential decisions
	// must not each have dialled.
	if n := after - before; n > 8 {
		t.Fatalf("%d connections accepted for 42 sequential decisions and a multi-key Take: pooled TLS connections were replaced", n)
	}
}

// TestTLSRestartedServerReconnects: the pooled TLS connections of a
// server that restarted are found closed (conn.go checks a TLS
// connection's socket) and replaced before they carry a request, so the
// first request after the restart is answered, as over plain TCP
// (TestRestartedServerReconnects). Without the check on the socket under
// the TLS connection, the first request failed with EOF.
func TestTLSRestartedServerReconnects(t *testing.T) {
	srv, files := tlsServer(t)
	s, err := memcached.Open("memcacheds://"+srv.Addr, memcached.WithTLS(&tls.Config{RootCAs: files.Roots}),
		memcached.WithTimeout(5*time.Second), memcached.WithMaxIdleConns(8))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bucket := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 1 << 20, Period: time.Hour})
	fillPool(t, s, []string{"a", "b", "c"}, bucket, 8)
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	out := make([]algo.Decision, 1)
	for i := range 16 {
		if _, err := s.Take(ctx(t), []store.Request{{Key: "a", Limit: bucket, Cost: 1}}, out); err != nil {
			t.Fatalf("Take %d after the server restarted: %v; want an answer (a dead pooled TLS connection was used)", i+1, err)
		}
	}
}

// openErr opens url, which must fail within limit, and returns the error.
func openErr(t *testing.T, url string, limit time.Duration, opts ...memcached.Option) error {
	t.Helper()
	start := time.Now()
	s, err := memcached.Open(url, opts...)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%q) succeeded, want an error", url)
	}
	if d := time.Since(start); d > limit {
		t.Fatalf("Open(%q) failed after %v, want within %v: %v", url, d, limit, err)
	}
	return err
}

// TestTLSUntrusted: a server whose certificate no root trusts (the system
// roots, without WithTLS) fails Open with an error that says so and names
// the server, under WithPartialStart too (it answered: no retry helps).
func TestTLSUntrusted(t *testing.T) {
	srv, _ := tlsServer(t)
	url := "memcacheds://" + srv.Addr
	for _, partial := range []bool{false, true} {
		opts := []memcached.Option{memcached.WithTimeout(2 * time.Second)}
		if partial {
			opts = append(opts, memcached.WithPartialStart())
		}
		err := openErr(t, url, 10*time.Second, opts...)
		for _, want := range []string{"x509: certificate signed by unknown authority", "server " + srv.Addr, "SSL_CERT_FILE"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%q) partial=%v: %v; want it to say %q", url, partial, err, want)
			}
		}
		if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, memcached.ErrTLSMismatch) {
			t.Errorf("Open(%q): %v; want store.ErrUnavailable and not ErrTLSMismatch", url, err)
		}
	}
	// Verified against the host: the certificate names 127.0.0.1 and
	// localhost, not the name given.
	_, files := tlsServer(t)
	err := openErr(t, url, 10*time.Second, memcached.WithTimeout(2*time.Second),
		memcached.WithTLS(&tls.Config{RootCAs: files.Roots}))
	if !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("Open(%q) trusting another CA: %v", url, err)
	}
	srv2 := testserver.NewMemcachedTLSWith(t, files)
	err = openErr(t, "memcacheds://"+srv2.Addr, 10*time.Second, memcached.WithTimeout(2*time.Second),
		memcached.WithTLS(&tls.Config{RootCAs: files.Roots, ServerName: "cache.example"}))
	if !strings.Contains(err.Error(), "x509: certificate is valid for localhost, not cache.example") {
		t.Errorf("Open with ServerName cache.example: %v", err)
	}
}

// TestTLSMismatch: memcacheds:// at a plain memcached, which answers the
// ClientHello with an error line (or, were it to wait for the line's end,
// not at all), and memcached:// at a TLS memcached, which resets the
// connection, fail Open within the timeout's bound saying which scheme to
// use, with errors wrapping ErrTLSMismatch and store.ErrUnavailable, under
// WithPartialStart too.
func TestTLSMismatch(t *testing.T) {
	const timeout = 500 * time.Millisecond
	tlsSrv, _ := tlsServer(t)
	for _, tc := range []struct {
		name, url, want string
	}{
		{"memcacheds at a plain server", "memcacheds://" + addr, "without TLS it answers version: the server does not speak TLS; use memcached:// for a plain server"},
		{"memcached at a TLS server", "memcached://" + tlsSrv.Addr, tlsSrv.Addr + " speaks TLS: use memcacheds://"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, partial := range []bool{false, true} {
				opts := []memcached.Option{memcached.WithTimeout(timeout)}
				if partial {
					opts = append(opts, memcached.WithPartialStart())
				}
				err := openErr(t, tc.url, 3*timeout+time.Second, opts...)
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Open(%q) partial=%v: %v\nwant it to say %q", tc.url, partial, err, tc.want)
				}
				if !errors.Is(err, memcached.ErrTLSMismatch) || !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("Open(%q): %v; want ErrTLSMismatch and store.ErrUnavailable", tc.url, err)
				}
			}
		})
	}
}

// TestTLSMismatchSilentServer: memcacheds:// at a plain server that waits
// for the end of the ClientHello's "line" (a listener that reads and never
// answers, until its own plain version probe) fails after the handshake's
// timeout, saying that the handshake got no answer and the server answers
// without TLS.
func TestTLSMismatchSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for range 20 {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				r := bufio.NewReader(c)
				for range 100 {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if line == "version\r\n" {
						io.WriteString(c, "VERSION 1.6.18\r\n")
					}
				}
			}()
		}
	}()
	const timeout = 300 * time.Millisecond
	url := "memcacheds://" + l.Addr().String()
	err = openErr(t, url, 3*timeout+time.Second, memcached.WithTimeout(timeout))
	want := fmt.Sprintf("(the TLS handshake with %s got no answer within %v, and without TLS it answers version: the server does not speak TLS; use memcached:// for a plain server)", l.Addr(), timeout)
	if !strings.Contains(err.Error(), want) || !errors.Is(err, memcached.ErrTLSMismatch) {
		t.Fatalf("Open(%q): %v\nwant it to say %q and wrap ErrTLSMismatch", url, err, want)
	}
}

// TestTLSClientCertificate: a server that requires a client certificate
// (ssl_verify_mode=2) refuses memcacheds:// without one, which says so and
// is not taken for a server that did not answer (WithPartialStart fails
// too); WithTLS with the certificate opens it.
func TestTLSClientCertificate(t *testing.T) {
	dir := t.TempDir()
	files, err := testserver.WriteTLSFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := testserver.NewMemcachedTLSWith(t, files, "-o", "ssl_verify_mode=2,ssl_ca_cert="+files.CAFile)
	url := "memcacheds://" + srv.Addr
	for _, partial := range []bool{false, true} {
		opts := []memcached.Option{memcached.WithTimeout(2 * time.Second), memcached.WithTLS(&tls.Config{RootCAs: files.Roots})}
		if partial {
			opts = append(opts, memcached.WithPartialStart())
		}
		err := openErr(t, url, 10*time.Second, opts...)
		for _, want := range []string{"server " + srv.Addr, "memcacheds:// sends none", "Certificates"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%q) without a client certificate, partial=%v: %v; want it to say %q", url, partial, err, want)
			}
		}
		var ne net.Error
		if !errors.Is(err, store.ErrUnavailable) || errors.As(err, &ne) {
			t.Errorf("Open(%q): %v; want store.ErrUnavailable and no net.Error (not a server that did not answer)", url, err)
		}
	}
	s, err := memcached.Open(url, memcached.WithTimeout(5*time.Second),
		memcached.WithTLS(&tls.Config{RootCAs: files.Roots, Certificates: []tls.Certificate{files.Client}}))
	if err != nil {
		t.Fatalf("Open(%q) with a client certificate: %v", url, err)
	}
	defer s.Close()
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Minute})
	out := make([]algo.Decision, 1)
	key := uniqueKey(t, "k")
	for i := range 3 {
		if _, err := s.Take(ctx(t), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
		if want := i < 2; out[0].Allowed != want {
			t.Fatalf("Take #%d: %+v, want allowed %v", i+1, out[0], want)
		}
	}
}

// TestWithTLSErrors: WithTLS(nil) is refused by the option, and WithTLS
// with a memcached:// URL by Open, each saying where and what to do.
func TestWithTLSErrors(t *testing.T) {
	_, err := memcached.Open("memcacheds://127.0.0.1:1", memcached.WithTLS(nil))
	if err == nil || !strings.Contains(err.Error(), "memcached: WithTLS: nil config") {
		t.Errorf("WithTLS(nil): %v", err)
	}
	_, err = memcached.Open("memcached://127.0.0.1:1", memcached.WithTLS(&tls.Config{}))
	want := `memcached: Open: WithTLS given with the store URL "memcached://127.0.0.1:1", which speaks plain TCP: use memcacheds:// for servers that speak TLS`
	if err == nil || err.Error() != want {
		t.Errorf("WithTLS with memcached://: %v\nwant %s", err, want)
	}
}
