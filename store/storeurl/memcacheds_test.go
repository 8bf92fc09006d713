package storeurl_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/storeurl"
)

// sslCertChildURL, set, makes TestMemcachedsSSLCertFile the child that
// opens it: Go reads SSL_CERT_FILE once per process, so the parent runs
// the test binary again with it set.
const sslCertChildURL = "FLOODGATE_TEST_SSL_CERT_CHILD_URL"

// TestMemcachedsSSLCertFile: memcacheds:// through storeurl.Open, which
// gives memcached no TLS option, verifies the servers against the system
// roots, which SSL_CERT_FILE replaces: with it naming the test CA, a ring
// of a server named by its IP address and one by localhost opens and
// decides; without it, the certificate is not trusted.
func TestMemcachedsSSLCertFile(t *testing.T) {
	if u := os.Getenv(sslCertChildURL); u != "" {
		st, err := storeurl.Open(u, storeurl.WithTimeout(5*time.Second))
		if err != nil {
			t.Fatalf("child: Open(%q) with SSL_CERT_FILE=%s: %v", u, os.Getenv("SSL_CERT_FILE"), err)
		}
		defer st.Close()
		l, err := algo.Compile(algo.Params{Algorithm: algo.TokenBucket, Limit: 2, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]algo.Decision, 1)
		key := "storeurl-sslcert-" + time.Now().Format("150405.000000000")
		for i := range 3 {
			if _, err := st.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out); err != nil {
				t.Fatalf("child: Take %d: %v", i+1, err)
			}
			if want := i < 2; out[0].Allowed != want {
				t.Fatalf("child: Take %d: %+v, want allowed %v", i+1, out[0], want)
			}
		}
		return
	}
	a, files := testserver.NewMemcachedTLS(t)
	b := testserver.NewMemcachedTLSWith(t, files)
	u := "memcacheds://" + a.Addr + ",localhost:" + strings.TrimPrefix(b.Addr, "127.0.0.1:")
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemcachedsSSLCertFile$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), sslCertChildURL+"="+u, "SSL_CERT_FILE="+files.CAFile)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestMemcachedsSSLCertFile") {
		t.Fatalf("child with SSL_CERT_FILE: %v\n%s", err, out)
	}

	// Without it (this process's roots), the certificate is not trusted.
	st, err := storeurl.Open(u, storeurl.WithTimeout(2*time.Second))
	if err == nil {
		st.Close()
		t.Fatalf("Open(%q) without the CA in the roots succeeded", u)
	}
	if !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") || !strings.Contains(err.Error(), a.Addr) {
		t.Fatalf("Open(%q) without the CA: %v; want x509's unknown authority naming %s", u, err, a.Addr)
	}
	// Given through WithMemcachedOptions, WithTLS's roots are used.
	st, err = storeurl.Open(u, storeurl.WithTimeout(5*time.Second), storeurl.WithMemcachedOptions(memcached.WithTLS(nil)))
	if err == nil || !strings.Contains(err.Error(), "WithTLS: nil config") {
		t.Fatalf("Open with WithTLS(nil): %v", err)
	}
	if st != nil {
		t.Fatalf("Open with WithTLS(nil) returned the non-nil store %#v", st)
	}
}

// TestMemcachedsNotTransient: a memcacheds:// URL that no retry opens is
// returned by OpenRetrying as an error, not a store retrying it for ever
// while the failure policy answers: the scheme does not match the
// server's TLS (either way), the certificate is not trusted, or the
// server wants a client certificate. A server not up yet still is
// retried.
func TestMemcachedsNotTransient(t *testing.T) {
	tlsSrv, files := testserver.NewMemcachedTLS(t)
	certSrv := testserver.NewMemcachedTLSWith(t, files, "-o", "ssl_verify_mode=2,ssl_ca_cert="+files.CAFile)
	plain := testserver.Memcached(t)
	for _, tc := range []struct {
		name, url, want string
		mismatch        bool
	}{
		{"memcacheds at a plain server", "memcacheds://" + plain, "the server does not speak TLS; use memcached://", true},
		{"memcached at a TLS server", "memcached://" + tlsSrv.Addr, "speaks TLS: use memcacheds://", true},
		{"untrusted certificate", "memcacheds://" + tlsSrv.Addr, "certificate signed by unknown authority", false},
		{"client certificate wanted", "memcacheds://" + certSrv.Addr, "memcacheds:// sends none", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []storeurl.Option{storeurl.WithTimeout(500 * time.Millisecond), storeurl.WithRetryBackoff(time.Hour, time.Hour)}
			if tc.name == "client certificate wanted" {
				opts = append(opts, storeurl.WithMemcachedOptions(memcached.WithTLS(&tls.Config{RootCAs: files.Roots})))
			}
			st, err := storeurl.OpenRetrying(tc.url, opts...)
			if st != nil {
				st.Close()
				t.Fatalf("OpenRetrying(%q) = %T, %v; want the error, no store retrying it", tc.url, st, err)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenRetrying(%q): %v; want it to say %q", tc.url, err, tc.want)
			}
			if errors.Is(err, memcached.ErrTLSMismatch) != tc.mismatch {
				t.Errorf("OpenRetrying(%q): %v; ErrTLSMismatch %v, want %v", tc.url, err, !tc.mismatch, tc.mismatch)
			}
			if storeurl.Transient(err) {
				t.Errorf("Transient(%v) = true", err)
			}
		})
	}
	if !slices.Contains(storeurl.Schemes(), "memcacheds") {
		t.Errorf("Schemes() = %v, want memcacheds in it", storeurl.Schemes())
	}
}
