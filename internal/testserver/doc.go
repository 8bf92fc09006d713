// Package testserver starts real Redis (standalone, Cluster, Sentinel) and Memcached
// servers for tests, benchmarks and end-to-end tests, using the binaries from Debian's
// packages (redis-server and redis-tools for redis-server/redis-cli, memcached, nutcracker for
// twemproxy).
//
// Every server listens on a free port of 127.0.0.1 only, keeps its files in a fresh
// temporary directory, and is stopped by PID.
//
// # Shared servers from the environment
//
// The testing.TB helpers Redis, RedisCluster, RedisSentinel and Memcached first look at
// environment variables, so that scripts/test.sh can start one set of servers for the whole
// run (see cmd/testservers):
//
//	FLOODGATE_TEST_REDIS=127.0.0.1:6379                    standalone Redis
//	FLOODGATE_TEST_REDIS_CLUSTER=127.0.0.1:7000,127.0.0.1:7001,...   cluster seed addresses
//	FLOODGATE_TEST_REDIS_SENTINEL=mymaster@127.0.0.1:26379,127.0.0.1:26380,127.0.0.1:26381
//	FLOODGATE_TEST_MEMCACHED=127.0.0.1:11211
//
// When a variable is set, its value is returned as is and nothing is started. Such servers
// are shared by every test package of the run, concurrently: use unique key prefixes, never
// FLUSHALL/FLUSHDB or flush_all, and never kill, restart or reconfigure them.
// When the variable is unset, a private server is started and stopped with tb.Cleanup.
//
// # Private servers for outage tests
//
// NewRedis, NewRedisCluster, NewRedisSentinel and NewMemcached always start private
// servers (they ignore the environment) and return handles with PIDs, so a test may
// Kill, Stop or Restart them (for example kill a cluster master to test failover).
// NewMemcachedTLS starts a memcached that speaks TLS only (memcached -Z), with a
// certificate for 127.0.0.1 and localhost signed by a CA it makes (WriteTLSFiles), whose
// files are in the test's temporary directory.
//
// # Without testing.TB
//
// StartRedis, StartRedisCluster, StartRedisSentinel and StartMemcached start servers from a
// TestMain, a benchmark harness or a program. The caller owns them and must stop them:
//
//	srv, err := testserver.StartRedis()
//	if err != nil { ... }
//	defer srv.Stop()
//
// Servers are started with Pdeathsig (Linux) so that they are also killed if the process
// that started them dies without cleaning up (e.g. a test binary killed by -timeout).
//
// # Missing binaries
//
// When a binary is not on PATH, the Start functions return a *MissingBinaryError. The TB
// helpers turn it into tb.Skipf, or tb.Fatalf when the environment variable CI is non-empty
// (CI must never silently skip). scripts/test.sh installs the packages.
package testserver
