// Package neterr classifies the network errors the stores' Open hints
// read: a TLS alert the server sent, a deadline that passed.
package neterr

import (
	"context"
	"errors"
	"net"
	"syscall"
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
