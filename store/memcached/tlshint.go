package memcached

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/floodgate/floodgate/internal/neterr"
	"github.com/floodgate/floodgate/store"
)

// ErrTLSMismatch is wrapped by Open's error when the URL's scheme does not
// match a server's TLS: memcacheds:// at a plain server (the TLS handshake
// gets a memcached error line or no answer, and without TLS the server
// answers version) or memcached:// at a TLS port (the server resets the
// connection, and a TLS handshake gets an answer). The error wraps
// store.ErrUnavailable too, as any connection error does, but no retry
// opens the store: the URL must change. It fails Open under
// WithPartialStart as well: the server answered.
var ErrTLSMismatch = errors.New("memcached: the URL's scheme does not match the server's TLS")

// hintError is a check's error with what the store found out about the
// server's TLS.
type hintError struct {
	err  error
	text string // " (…)"
	// mismatch: the error wraps ErrTLSMismatch. Else, when opaque, it
	// wraps store.ErrUnavailable alone: the server refused the
	// connection in TLS (an alert), which reads as a network error that
	// may pass, and does not.
	mismatch, opaque bool
}

func (e *hintError) Error() string { return e.err.Error() + e.text }

func (e *hintError) Unwrap() []error {
	switch {
	case e.mismatch:
		return []error{e.err, ErrTLSMismatch}
	case e.opaque:
		return []error{store.ErrUnavailable}
	}
	return []error{e.err}
}

// tlsHint returns err, the error of the check of the server at addr, with
// what it means for TLS when it is one of these mistakes' symptoms, asking
// the server again (for at most timeout) to find out:
//
//   - memcacheds:// at a plain server: the server reads the TLS ClientHello
//     as a command line and answers ERROR (not a TLS record), or waits
//     for the line's end until the timeout. A version sent without TLS
//     that gets VERSION says so.
//   - memcached:// at a TLS port: the server resets the connection at the
//     first bytes, which are no TLS record. A TLS handshake that gets an
//     answer (a certificate, trusted or not, or an alert) says so.
//   - memcacheds:// at a server that wants a client certificate: it
//     answers the handshake (TLS 1.2) or, in TLS 1.3, the client's
//     Finished with an alert, and closes the connection; a request
//     written meanwhile may be met by a reset instead. A handshake with
//     dial followed by a read, nothing written, gets the alert.
//   - memcacheds:// at a server whose certificate is not trusted.
func tlsHint(addr string, dial dialFunc, useTLS bool, timeout time.Duration, err error) error {
	var rhe tls.RecordHeaderError
	var ua x509.UnknownAuthorityError
	switch {
	case useTLS && (errors.As(err, &rhe) || neterr.Timeout(err)):
		if !answersVersion(addr, timeout) {
			return err
		}
		what := "got an answer that is not TLS"
		if neterr.Timeout(err) {
			what = "got no answer within " + timeout.String()
		}
		return &hintError{err: err, mismatch: true, text: " (the TLS handshake with " + addr + " " + what +
			", and without TLS it answers version: the server does not speak TLS; use memcached:// for a plain server)"}
	case useTLS && (neterr.Alert(err) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && refusesTLS(addr, dial, timeout):
		return &hintError{err: err, opaque: true, text: " (the server refused the TLS connection: if it asks for a client certificate" +
			" (memcached -o ssl_verify_mode=2 or 3), memcacheds:// sends none; set ssl_verify_mode to 0 or 1," +
			" or give the library's memcached.WithTLS a tls.Config with Certificates)"}
	case useTLS && errors.As(err, &ua):
		return &hintError{err: err, text: " (to trust a private CA, point SSL_CERT_FILE at its certificate," +
			" or give the library's memcached.WithTLS a tls.Config with RootCAs)"}
	case !useTLS && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		if neterr.SpeaksTLS(addr, timeout) {
			return &hintError{err: err, mismatch: true, text: " (" + addr + " speaks TLS: use memcacheds://)"}
		}
	}
	return err
}

// refusesTLS reports whether addr answers a TLS handshake made with dial
// (the store's configuration), and the wait for its first record (nothing
// written), with an alert.
func refusesTLS(addr string, dial dialFunc, timeout time.Duration) bool {
	c, err := dialTimeout(dial, addr, timeout)
	if err != nil {
		return neterr.Alert(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err = c.Read(make([]byte, 1))
	return neterr.Alert(err)
}

// answersVersion reports whether addr answers version with VERSION over
// plain TCP.
func answersVersion(addr string, timeout time.Duration) bool {
	return version((&net.Dialer{}).DialContext, addr, timeout) == nil
}
