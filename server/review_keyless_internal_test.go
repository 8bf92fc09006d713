package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// keyless strips the operation and the key from every store error shape
// that carries them, not only from a breaker's: /readyz and the "store not
// answering" line showed `redis: peek "fg:__ping": store: unavailable:
// dial tcp …` though SERVER.md says they give the store's text without
// the operation and the key (a key holds a client's address or API key).
func TestKeylessEveryShape(t *testing.T) {
	const secret = "203.0.113.77"
	key := "fg:api|remote_address=" + secret + "#token_bucket:1000000"
	dial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 6379}, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	redisRefused := fmt.Errorf("redis: peek %q: %w: %w", key, store.ErrUnavailable, dial)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"redis, connection refused", redisRefused, "dial tcp 10.0.0.5:6379: connect: connection refused"},
		{"redis, a server's reply", fmt.Errorf("redis: take %q: %w: %w", key, store.ErrUnavailable,
			errors.New("READONLY You can't write against a read only replica.")), "READONLY You can't write against a read only replica."},
		{"redis, unacknowledged writes", fmt.Errorf("redis: take %q: %w", key, &redis.AckError{Acked: 0, Want: 1, Within: 50 * time.Millisecond}),
			"written but acknowledged by 0 of 1 replica"},
		{"redis cluster, a partition's failure", &store.PartitionError{Err: redisRefused, Failed: []int{3}},
			"dial tcp 10.0.0.5:6379: connect: connection refused"},
		{"memcached, a server error", fmt.Errorf("%w: memcached %s %q: %w", store.ErrUnavailable, "take", key,
			errors.New("SERVER_ERROR out of memory storing object")), "SERVER_ERROR out of memory storing object"},
		{"memcached, contention", fmt.Errorf("%w: memcached: key %q: %d compare-and-swap attempts lost to concurrent writers; nothing was charged",
			store.ErrContention, key, 17), "compare-and-swap attempts lost"},
		{"resilient, a peek that failed", fmt.Errorf("resilient: %s failed: %w: %w", "ping", store.ErrUnavailable, redisRefused),
			"dial tcp 10.0.0.5:6379: connect: connection refused"},
		{"resilient, circuit open", &resilient.CircuitOpenError{Failures: 5, Last: redisRefused},
			"resilient: circuit open after 5 consecutive failures; last: dial tcp 10.0.0.5:6379: connect: connection refused"},
		{"resilient, timeout", fmt.Errorf("resilient: no answer within the timeout: %w", store.ErrUnavailable), "resilient: no answer within the timeout"},
	} {
		got := keyless(tc.err)
		if strings.Contains(got, secret) || strings.Contains(got, "fg:") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: keyless(%q) = %q, want %q without the key", tc.name, tc.err, got, tc.want)
		}
		if strings.Contains(got, "peek") || strings.Contains(got, "take") {
			t.Errorf("%s: keyless(%q) = %q names the operation", tc.name, tc.err, got)
		}
	}
}
