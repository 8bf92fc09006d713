//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd || solaris || illumos

package memcached

import (
	"errors"
	"syscall"
)

// fdAlive reports whether an idle socket can carry a request: a
// non-blocking read (Go's sockets are non-blocking) into buf must find
// nothing to read. EOF or a reset means the server closed it; bytes
// waiting would be taken for the next request's answer.
func fdAlive(fd uintptr, buf []byte) bool {
	n, err := syscall.Read(int(fd), buf)
	switch {
	case n > 0:
		return false // unsolicited bytes
	case n == 0 && err == nil:
		return false // EOF
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EINTR):
		return true
	}
	return false
}
