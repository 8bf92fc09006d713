package redis_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
)

// TestOpenNotRedis: a redis:// URL pointed at a memcached (a port mixed
// up) fails with a hint that the server is not Redis, not only the
// client's "received unknown message type: 69".
func TestOpenNotRedis(t *testing.T) {
	addr := testserver.Memcached(t)
	if addr == "" {
		return
	}
	_, err := redis.Open("redis://"+addr, redis.WithTimeout(2*time.Second))
	if err == nil {
		t.Fatal("redis.Open of a memcached succeeded")
	}
	if !strings.Contains(err.Error(), "is it a Redis server?") || !strings.Contains(err.Error(), "memcached://") {
		t.Errorf("redis.Open of a memcached: %v; want a hint that it is not Redis", err)
	}
}
