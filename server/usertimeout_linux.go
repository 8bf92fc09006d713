package server

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setTCPUserTimeout sets c's TCP_USER_TIMEOUT to d when c is a TCP
// connection: unacknowledged data older than d ends the connection,
// rather than the kernel's retransmissions (about 15 minutes).
func setTCPUserTimeout(c net.Conn, d time.Duration) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
}
