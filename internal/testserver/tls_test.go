package testserver

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestMemcachedTLS: the server NewMemcachedTLS starts answers over TLS a
// client that trusts files.Roots alone and verifies 127.0.0.1 or
// localhost, refuses a plain client (it resets the connection), is not
// trusted by a client with another CA's roots, and is gone once Stop
// returns.
func TestMemcachedTLS(t *testing.T) {
	srv, files := NewMemcachedTLS(t)
	for _, name := range []string{"127.0.0.1", "localhost"} {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: files.Roots, ServerName: name}}
		c, err := d.Dial("tcp", srv.Addr)
		if err != nil {
			t.Fatalf("TLS dial %s as %s trusting the test CA: %v", srv.Addr, name, err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "version\r\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(line, "VERSION ") {
			t.Fatalf("version over TLS: %q, %v", line, err)
		}
	}

	pc, err := net.DialTimeout("tcp", srv.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pc.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(pc, "version\r\n")
	b, err := io.ReadAll(pc)
	pc.Close()
	if len(b) != 0 || err == nil {
		t.Errorf("plain version at the TLS port: %q, %v; want the connection closed unanswered", b, err)
	}

	other, err := WriteTLSFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", srv.Addr, &tls.Config{RootCAs: other.Roots, ServerName: "127.0.0.1"})
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); !ok {
		t.Errorf("TLS dial trusting another CA: %v, want a certificate verification error", err)
	}

	pid := srv.PID()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if pid == 0 || srv.Running() {
		t.Fatalf("pid %d: running after Stop", pid)
	}
	if _, err := net.DialTimeout("tcp", srv.Addr, time.Second); err == nil {
		t.Errorf("%s still accepts connections after Stop", srv.Addr)
	}
}
