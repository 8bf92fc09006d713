package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TLSFiles are a private certificate authority and a server certificate it
// signed for 127.0.0.1, ::1 and localhost, written as PEM files, for
// servers started with TLS, and a client certificate it signed.
type TLSFiles struct {
	CAFile   string         // the CA's certificate
	CertFile string         // the server's certificate followed by the CA's (a chain)
	KeyFile  string         // the server's private key
	Roots    *x509.CertPool // the CA alone: a client's tls.Config.RootCAs
	// Client is a client certificate the CA signed, for a server that
	// asks for one (a client's tls.Config.Certificates).
	Client tls.Certificate
}

// WriteTLSFiles generates a CA, a server certificate and a client
// certificate it signed (ECDSA P-256, valid from an hour ago for a day)
// and writes the CA's and the server's to dir as ca.pem, server.pem and
// server-key.pem. Each call makes a new CA, so the
// files of two calls do not trust each other.
func WriteTLSFiles(dir string) (*TLSFiles, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testserver: CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "floodgate test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testserver: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("testserver: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testserver: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testserver: server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testserver: server key: %w", err)
	}
	f := &TLSFiles{
		CAFile:   filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "server.pem"),
		KeyFile:  filepath.Join(dir, "server-key.pem"),
		Roots:    x509.NewCertPool(),
	}
	f.Roots.AddCert(ca)
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testserver: client key: %w", err)
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "floodgate test client"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &clientKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("testserver: client certificate: %w", err)
	}
	f.Client = tls.Certificate{Certificate: [][]byte{clientDER}, PrivateKey: clientKey}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), caPEM...)
	for _, w := range []struct {
		path string
		data []byte
	}{
		{f.CAFile, caPEM},
		{f.CertFile, chain},
		{f.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})},
	} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, fmt.Errorf("testserver: %w", err)
		}
	}
	return f, nil
}

// StartMemcachedTLS starts a memcached that speaks TLS only, on a free
// port of 127.0.0.1: `memcached -Z -o ssl_chain_cert=CERT,ssl_key=KEY`
// with files' server certificate and key (see WriteTLSFiles), StartMemcached's
// arguments and extra, ready when it answers `version` over TLS to a client
// that trusts files.Roots alone and presents files.Client (so that a server
// started with -o ssl_verify_mode=2,ssl_ca_cert=files.CAFile is found ready
// too). It needs a memcached built with TLS (Debian's is). The caller must
// Stop it.
func StartMemcachedTLS(files *TLSFiles, extra ...string) (*Server, error) {
	cfg := &tls.Config{RootCAs: files.Roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{files.Client}}
	return startServer(serverSpec{
		kind: "memcached",
		bin:  "memcached",
		args: func(dir string, port int) ([]string, error) {
			args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-v",
				"-Z", "-o", "ssl_chain_cert=" + files.CertFile + ",ssl_key=" + files.KeyFile}
			if os.Geteuid() == 0 {
				args = append(args, "-u", "root")
			}
			return append(args, extra...), nil
		},
		probe:   func(addr string, timeout time.Duration) error { return pingMemcachedTLS(addr, cfg, timeout) },
		stopSig: syscall.SIGKILL,
	})
}

// pingMemcachedTLS sends `version` over TLS with cfg and expects VERSION.
func pingMemcachedTLS(addr string, cfg *tls.Config, timeout time.Duration) error {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
	return pingMemcachedOver(addr, " over TLS", timeout, func() (net.Conn, error) { return d.Dial("tcp", addr) })
}

// NewMemcachedTLS always starts a private memcached that speaks TLS only
// (StartMemcachedTLS), with a certificate for 127.0.0.1 and localhost
// signed by a CA made for it, whose files are in tb.TempDir(), and stops it
// with tb.Cleanup. A client trusts it with tls.Config{RootCAs: files.Roots}.
func NewMemcachedTLS(tb testing.TB, extraArgs ...string) (*Server, *TLSFiles) {
	tb.Helper()
	files, err := WriteTLSFiles(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return NewMemcachedTLSWith(tb, files, extraArgs...), files
}

// NewMemcachedTLSWith is NewMemcachedTLS with the certificate of files,
// e.g. a second server of a ring that one CA signed, or a server started
// with -o ssl_verify_mode=2,ssl_ca_cert=files.CAFile.
func NewMemcachedTLSWith(tb testing.TB, files *TLSFiles, extraArgs ...string) *Server {
	tb.Helper()
	s, err := StartMemcachedTLS(files, extraArgs...)
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, s.Stop, s)
	return s
}
