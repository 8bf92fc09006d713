package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// StartTwemproxy starts twemproxy (nutcracker, Debian package nutcracker) on
// a free port, proxying the memcached text protocol to backends (host:port
// each), ready when it answers `version`. The caller must Stop it. If
// nutcracker is not installed the error is a *MissingBinaryError.
func StartTwemproxy(backends ...string) (*Server, error) {
	return startServer(serverSpec{
		kind: "twemproxy",
		bin:  "nutcracker",
		args: func(dir string, port int) ([]string, error) {
			var b strings.Builder
			fmt.Fprintf(&b, "pool:\n  listen: 127.0.0.1:%d\n  hash: fnv1a_64\n  distribution: ketama\n  timeout: 2000\n  servers:\n", port)
			for _, be := range backends {
				fmt.Fprintf(&b, "   - %s:1\n", be)
			}
			conf := filepath.Join(dir, "nutcracker-"+strconv.Itoa(port)+".yml")
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, fmt.Errorf("testserver: %w", err)
			}
			// -s: the stats port, which must be free too (port+10000, as the
			// Cluster bus; freePort is asked for it). No -d: stays in the
			// foreground, so Stop ends it.
			return []string{"-c", conf, "-s", strconv.Itoa(port + 10000), "-p", filepath.Join(dir, "nutcracker-"+strconv.Itoa(port)+".pid")}, nil
		},
		bus:   true,
		probe: pingMemcached,
	})
}

// NewTwemproxy starts a private twemproxy in front of backends (see
// StartTwemproxy) and stops it with tb.Cleanup.
func NewTwemproxy(tb testing.TB, backends ...string) *Server {
	tb.Helper()
	s, err := StartTwemproxy(backends...)
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, s.Stop, s)
	return s
}
