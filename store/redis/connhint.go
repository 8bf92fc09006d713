package redis

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/internal/neterr"
	"github.com/floodgate/floodgate/store"
)

// ErrTLSMismatch is wrapped by Open's error when the URL's scheme does not
// match the server's TLS: rediss:// at a plain server (the TLS handshake
// gets no answer, and without TLS the server answers PING) or redis:// at
// a TLS port (the server drops the connection, and a TLS handshake gets
// an answer). The error wraps store.ErrUnavailable too, as any connection
// error does, but no retry opens the store: the URL must change.
var ErrTLSMismatch = errors.New("redis: the URL's scheme does not match the server's TLS")

// hint is connectHint's hint: its text, " (…)", and the error it wraps
// (ErrTLSMismatch for a URL whose scheme does not match the server's TLS,
// ErrPermission for a server that refused the TLS connection for want of
// a client certificate it accepts, else none).
type hint struct {
	text  string
	cause error
}

func (h *hint) Error() string { return h.text }
func (h *hint) Unwrap() error { return h.cause }

// connectHint says, for Open's connection error err, what the server at
// addrs seems to be when it is not a Redis server speaking what the URL
// says, or nil. It asks the server again to find out, each
// address for at most timeout, only when err is one of these mistakes'
// symptoms:
//
//   - rediss:// at a plain server: the server reads the TLS ClientHello as
//     the start of a command and waits for its end, so the handshake waits
//     out the timeout. A PING sent without TLS that gets a Redis reply
//     says so.
//   - redis:// at a TLS port: the server drops the connection at the
//     first bytes, which are no TLS record. A TLS handshake that gets an
//     answer (a certificate, trusted or not) says so.
//   - TLS to a server that requires a client certificate (tls-auth-clients
//     yes, Redis's default with TLS) and got none it accepts: it answers
//     the handshake (TLS 1.2) or, in TLS 1.3, the client's Finished with
//     an alert and closes the connection; a command written meanwhile
//     may be met by a reset or an EOF instead. A handshake made with the
//     same configuration, followed by a read (nothing written), in which
//     the server asks for a client certificate and then sends an alert
//     says so (see refusedClientCert).
//   - a reply that is not RESP: the server is another kind; its first
//     line, read again, says which (memcached, an HTTP server).
func connectHint(addrs []string, tlsCfg *tls.Config, timeout time.Duration, err error) *hint {
	switch {
	case strings.Contains(err.Error(), "unknown message type"):
		for _, a := range addrs {
			if line, ok := firstLine(a, tlsCfg, timeout, "HELLO 3"); ok {
				return &hint{text: notRedisHint(line)}
			}
		}
		return &hint{text: notRedisHint("")}
	case tlsCfg != nil && neterr.Timeout(err):
		for _, a := range addrs {
			if line, ok := firstLine(a, nil, timeout, "PING"); ok && (strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-")) {
				return &hint{text: " (the TLS handshake with " + a + " got no answer within " + timeout.String() +
					", and without TLS it answers PING: the server does not speak TLS; use redis:// for a plain server)", cause: ErrTLSMismatch}
			}
		}
	case tlsCfg != nil && (neterr.Alert(err) || isDropped(err)):
		for _, a := range addrs {
			if text, ok := refusedClientCert(a, tlsCfg, timeout); ok {
				return &hint{text: text, cause: ErrPermission}
			}
		}
	case tlsCfg == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		for _, a := range addrs {
			if neterr.SpeaksTLS(a, timeout) {
				return &hint{text: " (" + a + " speaks TLS: use rediss://)", cause: ErrTLSMismatch}
			}
		}
	}
	return nil
}

// refusedClientCert makes a TLS handshake with addr with cfg, then waits
// for the server's first record (nothing written), for at most timeout.
// When the server asked for a client certificate and then refused the
// connection with an alert (in the handshake, or after it in TLS 1.3),
// it returns the hint that says so, and whether a certificate was sent,
// and true; a server that did not ask is not waited for. An alert sent
// after the server asked is about the certificate: those about the
// handshake's parameters (version, ciphers) come before the request.
func refusedClientCert(addr string, cfg *tls.Config, timeout time.Duration) (string, bool) {
	cfg = cfg.Clone()
	given, certs := cfg.GetClientCertificate, cfg.Certificates
	var asked, sent bool
	cfg.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		asked = true
		c, err := clientCert(cri, given, certs)
		sent = err == nil && c != nil && len(c.Certificate) > 0
		return c, err
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, cfg)
	if err == nil {
		defer c.Close()
		if !asked {
			return "", false
		}
		_ = c.SetReadDeadline(time.Now().Add(timeout))
		_, err = c.Read(make([]byte, 1))
	}
	if !asked || !neterr.Alert(err) {
		// A connection closed without an alert after the handshake
		// (a TLS proxy whose backend is down, even one that asks for
		// an optional client certificate) is no refusal.
		return "", false
	}
	switch {
	case sent:
		return " (" + addr + " refused the TLS connection after asking for a client certificate: it does not accept the one sent;" +
			" is it signed by a CA of the server's tls-ca-cert-file (or tls-ca-cert-dir), and valid now?)", true
	case given != nil || len(certs) > 0:
		return " (" + addr + " refused the TLS connection after asking for a client certificate: the TLS configuration has none" +
			" signed by a CA the server accepts, so none was sent)", true
	}
	return " (" + addr + " refused the TLS connection: it requires a client certificate (tls-auth-clients yes, Redis's default with TLS)," +
		" and rediss:// sends none; set tls-auth-clients no (or optional) and authenticate with the ACL user," +
		" or give the library's redis.WithTLSConfig a tls.Config with Certificates)", true
}

// clientCert picks the client certificate a handshake sends the server
// that asked for one with cri, as crypto/tls does for a tls.Config with
// GetClientCertificate given and Certificates certs: given's, else the
// first of certs the server accepts, else none (an empty certificate).
func clientCert(cri *tls.CertificateRequestInfo, given func(*tls.CertificateRequestInfo) (*tls.Certificate, error), certs []tls.Certificate) (*tls.Certificate, error) {
	if given != nil {
		return given(cri)
	}
	for i := range certs {
		if cri.SupportsCertificate(&certs[i]) == nil {
			return &certs[i], nil
		}
	}
	return new(tls.Certificate), nil
}

// isDropped reports whether err is a connection the server closed or
// reset.
func isDropped(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// notRedisHint is the hint for a server whose reply, line (its first
// line, "" when it could not be read again), is not RESP.
func notRedisHint(line string) string {
	switch {
	case strings.HasPrefix(line, "ERROR"), strings.HasPrefix(line, "CLIENT_ERROR"), strings.HasPrefix(line, "SERVER_ERROR"):
		// A memcached answers a command it does not know (HELLO, the
		// client's first) with ERROR.
		return " (is it a memcached? its reply " + store.QuoteReply(line) + " is memcached's protocol, not Redis's; memcached:// is the URL of a memcached)"
	case strings.HasPrefix(line, "HTTP/"):
		return " (is it an HTTP server? its reply " + store.QuoteReply(line) + " is HTTP, not Redis's protocol)"
	}
	return " (is it a Redis server? its reply is not Redis's protocol)"
}

// firstLine sends addr the command cmd, an inline command (HELLO 3, what
// the client sends first, without the credentials), and returns the
// first line of its reply.
func firstLine(addr string, tlsCfg *tls.Config, timeout time.Duration, cmd string) (string, bool) {
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if tlsCfg != nil {
		c, err = tls.DialWithDialer(d, "tcp", addr, tlsCfg)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return "", false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, cmd+"\r\n"); err != nil {
		return "", false
	}
	line, err := bufio.NewReaderSize(io.LimitReader(c, 256), 256).ReadString('\n')
	if err != nil && line == "" {
		return "", false
	}
	return strings.TrimRight(line, "\r\n"), true
}
