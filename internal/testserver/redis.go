package testserver

import (
	"fmt"
	"strconv"
	"time"
)

// redisBaseArgs is the command line shared by every redis-server started by this package.
func redisBaseArgs(dir string, port int) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", dir,
		// Replicas (Sentinel set, Cluster) sync at once instead of after the default 5 s.
		"--repl-diskless-sync-delay", "0",
	}
}

// redisSpec returns the spec of a redis-server with extra arguments appended to the base
// command line. dir may be empty for a fresh temporary directory.
func redisSpec(kind, dir string, bus bool, extra ...string) serverSpec {
	return serverSpec{
		kind: kind,
		bin:  "redis-server",
		bus:  bus,
		dir:  dir,
		args: func(dir string, port int) ([]string, error) {
			return append(redisBaseArgs(dir, port), extra...), nil
		},
		probe: pingRedis,
	}
}

// StartRedis starts a standalone redis-server on a free 127.0.0.1 port
// (redis-server --port P --bind 127.0.0.1 --save "" --appendonly no) in a temporary
// directory and waits until it answers PING. The caller must Stop it (defer srv.Stop()).
// If redis-server is not installed the error is a *MissingBinaryError.
func StartRedis() (*Server, error) {
	return StartRedisArgs()
}

// StartRedisArgs is StartRedis with extra redis-server arguments appended to the defaults,
// e.g. StartRedisArgs("--maxmemory", "10mb", "--requirepass", "secret").
func StartRedisArgs(extra ...string) (*Server, error) {
	return startServer(redisSpec("redis", "", false, extra...))
}

// waitFor polls check every interval until it returns nil or timeout passes; the error
// then wraps check's last error.
func waitFor(what string, timeout, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: %s: not done after %v: %w", what, timeout, err)
		}
		time.Sleep(interval)
	}
}

// replicaLinkUp returns nil when the replica at addr reports master_link_status:up.
func replicaLinkUp(addr string) error {
	info, err := redisString(addr, probeTimeout, "INFO", "replication")
	if err != nil {
		return err
	}
	if st := infoField(info, "master_link_status"); st != "up" {
		return fmt.Errorf("replica %s: master_link_status %q", addr, st)
	}
	return nil
}
