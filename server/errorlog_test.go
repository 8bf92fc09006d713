package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"log"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/server"
)

// selfSigned is a TLS server configuration with a self-signed certificate
// for 127.0.0.1, made for one test.
func selfSigned(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// A client that does not speak TLS to a TLS listener fails its handshake:
// net/http's message is a DEBUG record of the server's logger naming the
// listener, and nothing goes to the standard logger (stderr).
func TestTLSHandshakeErrorIsStructured(t *testing.T) {
	var std logBuffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&std)
	var logs logBuffer
	srv := serverFor(t, releaseConfig, server.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	ls, err := server.Listen("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls.HTTP = tls.NewListener(ls.HTTP, selfSigned(t))
	serve(t, srv, ls)

	c, err := net.Dial("tcp", ls.HTTP.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("SSH-2.0-scanner\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Read(make([]byte, 64)) // returns when the server closes the connection
	c.Close()

	want := `level=DEBUG msg="http: TLS handshake error from 127.0.0.1:`
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the server's log does not say %q after 5s: %s (standard logger: %q)", want, logs.String(), std.String())
		}
		time.Sleep(10 * time.Millisecond) // waiting for the server's goroutine, not for math
	}
	if l := logs.lines(want, " listener=http"); len(l) != 1 {
		t.Errorf("handshake records naming the listener: %q, want one: %s", l, logs.String())
	}
	if std.String() != "" {
		t.Errorf("the standard logger got %q; want nothing", std.String())
	}
}
