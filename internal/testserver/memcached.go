package testserver

import (
	"os"
	"strconv"
	"syscall"
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
