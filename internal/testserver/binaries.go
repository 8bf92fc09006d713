package testserver

import (
	"fmt"
	"os"
	"os/exec"
)

// Environment variables read by the testing.TB helpers.
const (
	// EnvRedis holds the address (host:port) of a standalone Redis.
	EnvRedis = "FLOODGATE_TEST_REDIS"
	// EnvRedisCluster holds comma-separated seed addresses of a Redis Cluster.
	EnvRedisCluster = "FLOODGATE_TEST_REDIS_CLUSTER"
	// EnvRedisSentinel holds "master@host:port,host:port,..." (master name @ sentinel addresses).
	EnvRedisSentinel = "FLOODGATE_TEST_REDIS_SENTINEL"
	// EnvMemcached holds the address (host:port) of a memcached.
	EnvMemcached = "FLOODGATE_TEST_MEMCACHED"
)

// Debian packages providing each binary.
var binaryPackages = map[string]string{
	"redis-server": "redis-server",
	"redis-cli":    "redis-tools",
	"memcached":    "memcached",
	"nutcracker":   "nutcracker",
}

// MissingBinaryError reports that a server binary is not installed.
type MissingBinaryError struct {
	Binary  string // e.g. "redis-server"
	Package string // Debian package that provides it, e.g. "redis-server"
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("testserver: %s not found on PATH: install the Debian package %s "+
		"(apt-get install -y %s), or run scripts/test.sh which installs it", e.Binary, e.Package, e.Package)
}

// lookBinary returns the path of a server binary, or a *MissingBinaryError.
func lookBinary(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		pkg := binaryPackages[name]
		if pkg == "" {
			pkg = name
		}
		return "", &MissingBinaryError{Binary: name, Package: pkg}
	}
	return p, nil
}

// isCI reports whether missing binaries must fail rather than skip.
func isCI() bool { return os.Getenv("CI") != "" }
