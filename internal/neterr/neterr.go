// Package neterr classifies the network errors the stores' Open hints
// read: a TLS alert the server sent, a deadline that passed; and probes
// whether a server speaks TLS.
package neterr

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"time"
)

// Alert reports whether err is a TLS alert the server sent: crypto/tls
// reports one as a *net.OpError whose Op is "remote error".
func Alert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// Timeout reports whether err is a deadline that passed.
func Timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) || (errors.As(err, &ne) && ne.Timeout())
}

// SpeaksTLS reports whether addr answers a TLS handshake within timeout:
// with a certificate (trusted or not; nothing is sent after it) or an
// alert. The stores' Open hints ask it of a server a plaintext client
// could not talk to.
func SpeaksTLS(addr string, timeout time.Duration) bool {
	host, _, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := &tls.Dialer{Config: &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
		return true
	}
	var ve *tls.CertificateVerificationError
	var ae tls.AlertError
	return errors.As(err, &ve) || errors.As(err, &ae) || Alert(err)
}
