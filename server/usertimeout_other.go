//go:build !linux

package server

import (
	"net"
	"time"
)

// setTCPUserTimeout does nothing where TCP_USER_TIMEOUT is Linux's alone.
func setTCPUserTimeout(net.Conn, time.Duration) {}
