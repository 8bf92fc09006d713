package redis

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestOpenClusterURLAtASentinel: redis-cluster:// at a Sentinel says it
// is one and which URL to use; it said "use redis://", which refuses a
// Sentinel too.
func TestOpenClusterURLAtASentinel(t *testing.T) {
	_, sentinels := testserver.RedisSentinel(t)
	s, err := Open("redis-cluster://"+sentinels[0], WithTimeout(2*time.Second))
	if err == nil {
		s.Close()
		t.Fatal("Open(redis-cluster://<a sentinel>) succeeded")
	}
	if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), "is a Redis Sentinel: use redis-sentinel://") || strings.Contains(err.Error(), "use redis://") {
		t.Errorf("Open(redis-cluster://<a sentinel>) = %v; want ErrBadURL saying it is a Sentinel and to use redis-sentinel://", err)
	}
}

// TestOpenSentinelUnknownMaster: a master name the sentinels do not
// monitor is a URL error naming it, not an outage (store.ErrUnavailable,
// "No such master with that name").
func TestOpenSentinelUnknownMaster(t *testing.T) {
	_, sentinels := testserver.RedisSentinel(t)
	s, err := Open("redis-sentinel://nosuchmaster@"+strings.Join(sentinels, ","), WithTimeout(2*time.Second))
	if err == nil {
		s.Close()
		t.Fatal("Open with an unknown master name succeeded")
	}
	if !errors.Is(err, ErrBadURL) || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), `no master named "nosuchmaster"`) {
		t.Errorf("Open(redis-sentinel://nosuchmaster@<sentinels>) = %v; want ErrBadURL naming the master, not store.ErrUnavailable", err)
	}
}

// TestOpenSentinelURLAtADataNodeIsBadURL: redis-sentinel:// at a Redis
// data node is a server of the wrong kind (ErrBadURL, as Open's
// documentation says), not an outage: it wrapped store.ErrUnavailable.
func TestOpenSentinelURLAtADataNodeIsBadURL(t *testing.T) {
	addr := testserver.Redis(t)
	s, err := Open("redis-sentinel://mymaster@"+addr, WithTimeout(2*time.Second))
	if err == nil {
		s.Close()
		t.Fatal("Open(redis-sentinel:// at a data node) succeeded")
	}
	if !errors.Is(err, ErrBadURL) || errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "is it a Redis Sentinel?") {
		t.Errorf("Open(redis-sentinel:// at a data node) = %v; want ErrBadURL with the sentinel hint, not store.ErrUnavailable", err)
	}
}
