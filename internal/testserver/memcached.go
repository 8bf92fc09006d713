package testserver

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// StartMemcached starts `memcached -l 127.0.0.1 -p P -U 0` (plus `-u root` when running as
// root, which memcached requires) on a free port and waits until it answers `version`.
// The caller must Stop it (defer srv.Stop()). If memcached is not installed the error is a
// *MissingBinaryError.
func StartMemcached() (*Server, error) {
	return StartMemcachedArgs()
}

// StartMemcachedArgs is StartMemcached with extra memcached arguments, e.g. "-m", "16".
func StartMemcachedArgs(extra ...string) (*Server, error) {
	return startServer(serverSpec{
		kind: "memcached",
		bin:  "memcached",
		args: func(dir string, port int) ([]string, error) {
			args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-v"}
			if os.Geteuid() == 0 {
				args = append(args, "-u", "root")
			}
			return append(args, extra...), nil
		},
		probe: pingMemcached,
		// memcached exits about 1 s after SIGTERM and has nothing to save.
		stopSig: syscall.SIGKILL,
	})
}

// StartMemcachedBinary starts a memcached that speaks only the binary protocol
// (`-B binary`, as a server with SASL does), ready when it answers a binary
// version request. The caller must Stop it.
func StartMemcachedBinary() (*Server, error) {
	return startServer(serverSpec{
		kind: "memcached",
		bin:  "memcached",
		args: func(dir string, port int) ([]string, error) {
			args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0", "-v", "-B", "binary"}
			if os.Geteuid() == 0 {
				args = append(args, "-u", "root")
			}
			return args, nil
		},
		probe:   pingMemcachedBinary,
		stopSig: syscall.SIGKILL,
	})
}

// pingMemcachedBinary sends a binary-protocol version request (magic 0x80,
// opcode 0x0b) and expects a response header (magic 0x81).
func pingMemcachedBinary(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	req := make([]byte, 24)
	req[0], req[1] = 0x80, 0x0b
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp := make([]byte, 24)
	if _, err := io.ReadFull(c, resp); err != nil {
		return err
	}
	if resp[0] != 0x81 || resp[1] != 0x0b {
		return fmt.Errorf("testserver: memcached %s: unexpected binary reply % x", addr, resp[:2])
	}
	return nil
}
