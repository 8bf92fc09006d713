package testserver

import (
	"errors"
	"os"
	"testing"
)

// Redis returns the address (host:port) of a standalone redis-server for tests.
// If FLOODGATE_TEST_REDIS is set it is returned as is (a server shared by the whole run:
// use unique keys, do not flush or kill it); otherwise a private server is started and
// stopped with tb.Cleanup.
func Redis(tb testing.TB) string {
	tb.Helper()
	if v := os.Getenv(EnvRedis); v != "" {
		return v
	}
	s := NewRedis(tb)
	if s == nil {
		return ""
	}
	return s.Addr
}

// RedisCluster returns the seed addresses of a Redis Cluster with 3 masters and 3 replicas.
// If FLOODGATE_TEST_REDIS_CLUSTER (comma-separated addresses) is set it is used; otherwise
// a private cluster is started and stopped with tb.Cleanup.
func RedisCluster(tb testing.TB) []string {
	tb.Helper()
	if v := os.Getenv(EnvRedisCluster); v != "" {
		addrs := splitAddrs(v)
		if len(addrs) == 0 {
			tb.Fatalf("testserver: %s=%q holds no address", EnvRedisCluster, v)
		}
		return addrs
	}
	c := NewRedisCluster(tb)
	if c == nil {
		return nil
	}
	return c.Addrs()
}

// RedisSentinel returns the master name and sentinel addresses of a set of 1 master,
// 1 replica and 3 sentinels. If FLOODGATE_TEST_REDIS_SENTINEL
// ("master@host:port,host:port,host:port") is set it is used; otherwise a private set is
// started and stopped with tb.Cleanup.
func RedisSentinel(tb testing.TB) (master string, sentinels []string) {
	tb.Helper()
	if v := os.Getenv(EnvRedisSentinel); v != "" {
		m, s, err := ParseSentinelSpec(v)
		if err != nil {
			tb.Fatalf("testserver: %s: %v", EnvRedisSentinel, err)
		}
		return m, s
	}
	set := NewRedisSentinel(tb)
	if set == nil {
		return "", nil
	}
	return set.MasterName, set.Addrs()
}

// Memcached returns the address of a memcached. If FLOODGATE_TEST_MEMCACHED is set it is
// returned as is; otherwise `memcached -l 127.0.0.1 -p P -U 0` is started and stopped with
// tb.Cleanup.
func Memcached(tb testing.TB) string {
	tb.Helper()
	if v := os.Getenv(EnvMemcached); v != "" {
		return v
	}
	s := NewMemcached(tb)
	if s == nil {
		return ""
	}
	return s.Addr
}

// NewRedis always starts a private standalone redis-server (the environment is ignored),
// with extra redis-server arguments if given, and stops it with tb.Cleanup. Use it for
// tests that Kill, Pause or Restart the server.
func NewRedis(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	s, err := StartRedisArgs(extraArgs...)
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, s.Stop, s)
	return s
}

// NewRedisCluster always starts a private Redis Cluster (3 masters, 3 replicas) and stops it
// with tb.Cleanup. Use it for failover tests.
func NewRedisCluster(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := StartRedisCluster()
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, c.Stop, c.Nodes...)
	return c
}

// NewRedisSentinel always starts a private Sentinel set (master, replica, 3 sentinels) and
// stops it with tb.Cleanup. Use it for failover tests.
func NewRedisSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s, err := StartRedisSentinel()
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, s.Stop, s.Servers()...)
	return s
}

// NewMemcached always starts a private memcached, with extra arguments if given, and stops
// it with tb.Cleanup.
func NewMemcached(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	s, err := StartMemcachedArgs(extraArgs...)
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, s.Stop, s)
	return s
}

// NewMemcachedBinary always starts a private memcached that speaks only the binary
// protocol (see StartMemcachedBinary), and stops it with tb.Cleanup.
func NewMemcachedBinary(tb testing.TB) *Server {
	tb.Helper()
	s, err := StartMemcachedBinary()
	if err != nil {
		fail(tb, err)
		return nil
	}
	cleanup(tb, s.Stop, s)
	return s
}

// fail reports a start error: a missing binary skips the test, or fails it when CI is set;
// anything else fails it.
func fail(tb testing.TB, err error) {
	tb.Helper()
	var mb *MissingBinaryError
	if errors.As(err, &mb) {
		if isCI() {
			tb.Fatalf("%v (CI is set, so a missing server binary is an error, not a skip)", err)
		} else {
			tb.Skipf("%v", err)
		}
		return
	}
	tb.Fatalf("%v", err)
}

// cleanup registers stop with tb.Cleanup; if the test failed, the servers' logs are
// printed first to help debugging.
func cleanup(tb testing.TB, stop func() error, servers ...*Server) {
	tb.Cleanup(func() {
		if tb.Failed() {
			for _, s := range servers {
				tb.Logf("testserver: log of %s %s (%s):\n%s", s.Kind, s.Addr, s.LogPath, s.logTail(4<<10))
			}
		}
		if err := stop(); err != nil {
			tb.Errorf("testserver: stop: %v", err)
		}
	})
}
