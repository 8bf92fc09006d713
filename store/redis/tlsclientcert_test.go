package redis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/storeurl"
)

// tlsRedis starts a redis-server whose TLS port, with files' CA and server
// certificate, has tls-auth-clients auth, and returns that port's address.
func tlsRedis(t *testing.T, files *testserver.TLSFiles, auth string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	srv := testserver.NewRedis(t, "--tls-port", port, "--tls-cert-file", files.CertFile,
		"--tls-key-file", files.KeyFile, "--tls-ca-cert-file", files.CAFile, "--tls-auth-clients", auth)
	if srv == nil {
		t.Skip("no redis-server")
	}
	return "127.0.0.1:" + port
}

// openErrWithin opens url, which must fail within bound, and returns the
// error.
func openErrWithin(t *testing.T, url string, bound time.Duration, opts ...redis.Option) error {
	t.Helper()
	start := time.Now()
	s, err := redis.Open(url, opts...)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded, want an error", url)
	}
	if took := time.Since(start); took > bound {
		t.Errorf("Open(%s) failed after %v, want within %v: %v", url, took, bound, err)
	}
	return err
}

// takeThree takes 3 on a limit of 2 a minute, which must admit 2.
func takeThree(t *testing.T, s store.Store) {
	t.Helper()
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	key := "tls-client-cert-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	out := make([]algo.Decision, 1)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.Take(ctx, []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
		cancel()
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if want := i < 2; out[0].Allowed != want {
			t.Fatalf("take %d: %+v, want allowed %v", i, out[0], want)
		}
	}
}

// TestOpenTLSClientCertRequired: a redis-server with tls-auth-clients yes
// (Redis's default with TLS) refuses rediss:// without a client
// certificate: in the handshake (TLS 1.2), or after it (TLS 1.3), as an
// alert, a reset or an EOF by timing. Open says so, within its timeout,
// instead of the bare network error, and its error wraps ErrPermission,
// not store.ErrUnavailable nor a network error: no retry opens it, so
// OpenRetrying (floodgate serve --start-degraded) returns it rather than a
// store retrying for ever while the failure policy answers. A client
// certificate of the CA opens it; one of another CA is said to be
// refused.
func TestOpenTLSClientCertRequired(t *testing.T) {
	files, err := testserver.WriteTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	addr := tlsRedis(t, files, "yes")
	url := "rediss://" + addr
	const timeout = 2 * time.Second
	check := func(t *testing.T, err error, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Open(%s): %v\nwant it to say %q", url, err, w)
			}
		}
		var ne net.Error
		if !errors.Is(err, redis.ErrPermission) || errors.Is(err, store.ErrUnavailable) || errors.As(err, &ne) || errors.Is(err, io.EOF) {
			t.Errorf("Open(%s): %v\nwant redis.ErrPermission, and neither store.ErrUnavailable nor a network error", url, err)
		}
		if storeurl.Transient(err) {
			t.Errorf("storeurl.Transient(%v) = true", err)
		}
	}
	none := []string{addr + " refused the TLS connection: it requires a client certificate (tls-auth-clients yes, Redis's default with TLS)",
		"rediss:// sends none; set tls-auth-clients no (or optional)", "redis.WithTLSConfig a tls.Config with Certificates"}
	for _, v := range []struct {
		name    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		t.Run(v.name, func(t *testing.T) {
			for range 5 {
				cfg := &tls.Config{RootCAs: files.Roots, MinVersion: v.version, MaxVersion: v.version}
				check(t, openErrWithin(t, url, timeout, redis.WithTimeout(timeout), redis.WithTLSConfig(cfg)), none...)
			}
		})
	}
	t.Run("OpenRetrying", func(t *testing.T) {
		st, err := storeurl.OpenRetrying(url, storeurl.WithTimeout(timeout), storeurl.WithRetryBackoff(time.Hour, time.Hour),
			storeurl.WithRedisOptions(redis.WithTLSConfig(&tls.Config{RootCAs: files.Roots})))
		if st != nil {
			st.Close()
			t.Fatalf("OpenRetrying(%s) = %T, %v; want the error, no store retrying it", url, st, err)
		}
		check(t, err, none...)
	})
	t.Run("client certificate of another CA", func(t *testing.T) {
		other, err := testserver.WriteTLSFiles(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg := &tls.Config{RootCAs: files.Roots, Certificates: []tls.Certificate{other.Client}}
		err = openErrWithin(t, url, timeout, redis.WithTimeout(timeout), redis.WithTLSConfig(cfg))
		t.Logf("Open: %v", err)
		check(t, err, addr+" refused the TLS connection after asking for a client certificate: it does not accept the one sent")
	})
	t.Run("client certificate", func(t *testing.T) {
		s, err := redis.Open(url, redis.WithTimeout(timeout),
			redis.WithTLSConfig(&tls.Config{RootCAs: files.Roots, Certificates: []tls.Certificate{files.Client}}))
		if err != nil {
			t.Fatalf("Open(%s) with a client certificate: %v", url, err)
		}
		defer s.Close()
		takeThree(t, s)
	})
}

// TestOpenTLSClientCertNotRequired: with tls-auth-clients no or optional,
// rediss:// opens without a client certificate.
func TestOpenTLSClientCertNotRequired(t *testing.T) {
	files, err := testserver.WriteTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range []string{"no", "optional"} {
		t.Run(auth, func(t *testing.T) {
			url := "rediss://" + tlsRedis(t, files, auth)
			s, err := redis.Open(url, redis.WithTimeout(2*time.Second), redis.WithTLSConfig(&tls.Config{RootCAs: files.Roots}))
			if err != nil {
				t.Fatalf("Open(%s) with tls-auth-clients %s: %v", url, auth, err)
			}
			defer s.Close()
			takeThree(t, s)
		})
	}
}

// TestOpenTLSDroppedNotClientCert: a connection dropped for another reason
// is not taken for a refused client certificate: a listener that resets
// every connection at once (no TLS), a TLS server that closes after the
// handshake (a proxy whose backend is down), one that does so after
// asking for an optional client certificate, and a port nobody listens
// on. Each error wraps store.ErrUnavailable, as a server not up yet, and
// comes within the timeout.
func TestOpenTLSDroppedNotClientCert(t *testing.T) {
	files, err := testserver.WriteTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// serve accepts at most 50 connections, each handled by handle.
	serve := func(t *testing.T, handle func(net.Conn)) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for range 50 {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go handle(c)
			}
		}()
		return l.Addr().String()
	}
	closeAfterHandshake := func(auth tls.ClientAuthType) func(net.Conn) {
		return func(c net.Conn) {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: auth})
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			_ = tc.Handshake()
			tc.Close()
		}
	}
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downAddr := down.Addr().String()
	down.Close()
	for _, tc := range []struct {
		name string
		addr string
	}{
		{"plain reset", serve(t, func(c net.Conn) {
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		})},
		{"TLS closed after the handshake", serve(t, closeAfterHandshake(tls.NoClientCert))},
		{"TLS closed after asking for an optional certificate", serve(t, closeAfterHandshake(tls.RequestClientCert))},
		{"nobody listening", downAddr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const timeout = 2 * time.Second
			url := "rediss://" + tc.addr
			err := openErrWithin(t, url, timeout, redis.WithTimeout(timeout), redis.WithTLSConfig(&tls.Config{RootCAs: files.Roots}))
			t.Logf("Open: %v", err)
			if strings.Contains(err.Error(), "client certificate") || errors.Is(err, redis.ErrPermission) {
				t.Errorf("Open(%s): %v\nwant no client certificate hint nor redis.ErrPermission", url, err)
			}
			if !errors.Is(err, store.ErrUnavailable) || !storeurl.Transient(err) {
				t.Errorf("Open(%s): %v\nwant store.ErrUnavailable, transient", url, err)
			}
		})
	}
}
