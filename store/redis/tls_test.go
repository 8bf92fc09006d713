package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// rediss:// against a real redis-server speaking TLS with a certificate of
// a private CA: decisions work when the CA is trusted (WithTLSConfig), and
// the connection is refused, saying why, when it is not.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caPool, certFile, keyFile, caFile := tlsFiles(t, dir)
	port := freeTCPPort(t)
	srv := testserver.NewRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	if srv == nil {
		return
	}
	url := "rediss://127.0.0.1:" + strconv.Itoa(port)
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 3, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	st, err := Open(url, WithTLSConfig(&tls.Config{RootCAs: caPool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatalf("Open %s with the CA: %v", url, err)
	}
	defer st.Close()
	out := make([]algo.Decision, 1)
	for i := range 4 {
		if _, err := st.Take(context.Background(), []store.Request{{Key: "tls-key", Limit: l, Cost: 1}}, out); err != nil {
			t.Fatalf("take %d over TLS: %v", i, err)
		}
		if want := i < 3; out[0].Allowed != want {
			t.Fatalf("take %d over TLS: %+v, want allowed %v", i, out[0], want)
		}
	}

	// Without the CA the server's certificate is not trusted.
	bad, err := Open(url, WithTimeout(2*time.Second))
	if err == nil {
		_, err = bad.Take(context.Background(), []store.Request{{Key: "tls-key", Limit: l, Cost: 1}}, out)
		bad.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("rediss:// without trusting the CA: err %v, want a certificate error", err)
	}
}

// TestOpenTLSMismatch: rediss:// at a plain redis-server, whose TLS
// handshake gets no answer until the timeout, says so and that the server
// answers without TLS (use redis://), not only "context deadline
// exceeded"; redis:// at a redis-server's TLS port, which resets the
// connection, says that the server speaks TLS (use rediss://). Both errors
// wrap ErrTLSMismatch, which storeurl.Transient reads.
func TestOpenTLSMismatch(t *testing.T) {
	t.Run("rediss at a plain server", func(t *testing.T) {
		addr := testserver.Redis(t)
		err := openErr(t, "rediss://"+addr, WithTimeout(500*time.Millisecond))
		t.Logf("Open: %v", err)
		wantMessage(t, err, "the TLS handshake with "+addr+" got no answer within 500ms", "the server does not speak TLS; use redis:// for a plain server")
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Open = %v, want store.ErrUnavailable (a connection error, as before)", err)
		}
		if !errors.Is(err, ErrTLSMismatch) {
			t.Errorf("Open = %v, want ErrTLSMismatch", err)
		}
	})
	t.Run("redis at a TLS port", func(t *testing.T) {
		_, certFile, keyFile, caFile := tlsFiles(t, t.TempDir())
		port := freeTCPPort(t)
		srv := testserver.NewRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
			"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
		if srv == nil {
			return
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		err := openErr(t, "redis://"+addr, WithTimeout(2*time.Second))
		t.Logf("Open: %v", err)
		wantMessage(t, err, addr+" speaks TLS: use rediss://")
		if !errors.Is(err, ErrTLSMismatch) || !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Open = %v, want ErrTLSMismatch and store.ErrUnavailable", err)
		}
	})
}

// tlsFiles writes a CA and a server certificate for 127.0.0.1 it signed
// (testserver.WriteTLSFiles).
func tlsFiles(t *testing.T, dir string) (pool *x509.CertPool, certFile, keyFile, caFile string) {
	t.Helper()
	f, err := testserver.WriteTLSFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return f.Roots, f.CertFile, f.KeyFile, f.CAFile
}

// freeTCPPort is a loopback port nobody listens on at the moment.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
