package storeurl_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/storeurl"
)

// TestTransientTLSMismatch: a URL whose scheme does not match the
// server's TLS fails as a timeout (rediss:// at a plain server) or a
// dropped connection (redis:// at a TLS port), which store/redis tells
// apart from a server not up yet. OpenRetrying returns that error rather
// than a store that retries it for ever while the failure policy answers
// every call.
func TestTransientTLSMismatch(t *testing.T) {
	check := func(t *testing.T, url, want string) {
		t.Helper()
		st, err := storeurl.OpenRetrying(url, storeurl.WithTimeout(500*time.Millisecond), storeurl.WithRetryBackoff(time.Hour, time.Hour))
		if st != nil {
			st.Close()
			t.Fatalf("OpenRetrying(%q) = %T, %v; want the error, no store retrying it", url, st, err)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("OpenRetrying(%q) error %v, want it to say %q", url, err, want)
		}
		if !errors.Is(err, redis.ErrTLSMismatch) {
			t.Errorf("OpenRetrying(%q) error %v, want redis.ErrTLSMismatch", url, err)
		}
		if storeurl.Transient(err) {
			t.Errorf("Transient(%v) = true", err)
		}
	}
	t.Run("rediss at a plain server", func(t *testing.T) {
		srv := testserver.NewRedis(t)
		if srv == nil {
			t.Skip("no redis-server")
		}
		check(t, "rediss://"+srv.Addr, "the server does not speak TLS; use redis://")
	})
	t.Run("redis at a TLS port", func(t *testing.T) {
		certFile, keyFile := selfSigned(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		srv := testserver.NewRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
			"--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
		if srv == nil {
			t.Skip("no redis-server")
		}
		check(t, "redis://127.0.0.1:"+strconv.Itoa(port), "speaks TLS: use rediss://")
	})
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
