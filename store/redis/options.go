package redis

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Option configures a Store (see Open for the defaults).
type Option func(*options) error

type options struct {
	batchSize   int
	batchWindow time.Duration
	inflight    int
	timeout     time.Duration
	tls         *tls.Config
	client      func(*rueidis.ClientOption)
	testClock   func() time.Time
	probeKey    string
	// waitReplicas and waitTimeout are WithWait's (0: no WAIT).
	waitReplicas int
	waitTimeout  time.Duration
	// blockingPool is the rueidis client's BlockingPoolSize (0: its
	// default), which bounds the calls that WAIT at once (see waitSlots).
	blockingPool int
	// testTTLFloor is the least TTL of a key written at a test-clock time.
	testTTLFloor time.Duration
	// testNoLone sends lone takes as batches of one (lua/takes.lua), so
	// that a serial test can hold that script to algo too.
	testNoLone bool
}

func defaultOptions() options {
	return options{
		batchSize: 64,
		inflight:  2,
		timeout:   3 * time.Second,
		probeKey:  DefaultProbeKey,
	}
}

// WithBatchSize sets how many concurrent decisions are coalesced into one
// script call (one round trip, one script run). Default 64; 1 sends every
// decision on its own (rueidis still pipelines them on the connection).
func WithBatchSize(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 4096 {
			return fmt.Errorf("redis: WithBatchSize: must be between 1 and 4096, got %d", n)
		}
		o.batchSize = n
		return nil
	}
}

// WithBatchWindow sets how long a batch waits for more decisions before it
// is sent, when it is not full. Default 0: a batch leaves as soon as a
// sender is free, holding whatever queued meanwhile, which coalesces under
// load and adds no latency when idle.
func WithBatchWindow(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > time.Second {
			return fmt.Errorf("redis: WithBatchWindow: must be between 0 and 1s, got %v", d)
		}
		o.batchWindow = d
		return nil
	}
}

// WithInflightBatches sets how many batches may be in flight at once
// (pipelined on the connection); on a Cluster, per range of 256 hash
// slots (the store's partitions), each batched apart, so that a master
// that hangs holds up its own ranges' batches only. Default 2: on the 2-core machine of
// docs/BENCHMARKS.md, with the one-key scripts, two batches in flight
// decided 13 % more than one at the median (64 goroutines, 10 000 keys,
// quiet machine); more cost wake-ups on two shared cores. A Redis far away
// (a long round trip) may want 4.
func WithInflightBatches(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 1024 {
			return fmt.Errorf("redis: WithInflightBatches: must be between 1 and 1024, got %d", n)
		}
		o.inflight = n
		return nil
	}
}

// WithTimeout bounds every round trip: a batch of coalesced decisions and
// the rollback of a reservation (which runs even after the caller's
// context is done) get a context with this timeout; a call sent on its own
// runs under its caller's context, and the connection's reply timeout
// (rueidis's ConnWriteTimeout, for stores Open creates) bounds it too.
// Default 3s.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("redis: WithTimeout: must be > 0, got %v", d)
		}
		o.timeout = d
		return nil
	}
}

// WithTLSConfig sets the TLS configuration (e.g. a private CA or a client
// certificate). It turns TLS on for any URL; rediss:// without this option
// verifies the server against the system roots and its host name.
func WithTLSConfig(c *tls.Config) Option {
	return func(o *options) error {
		if c == nil {
			return fmt.Errorf("redis: WithTLSConfig: nil config")
		}
		o.tls = c
		return nil
	}
}

// WithClientOption lets f adjust the rueidis client options Open derived
// from the URL (timeouts, pool sizes, client name) before the client is
// created.
func WithClientOption(f func(*rueidis.ClientOption)) Option {
	return func(o *options) error {
		if f == nil {
			return fmt.Errorf("redis: WithClientOption: nil function")
		}
		o.client = f
		return nil
	}
}

// WithTestClock makes the store pass clock's time to the scripts instead
// of letting them read the Redis server's TIME. It exists for tests (the
// conformance suite and the differential test drive time explicitly);
// production stores must not use it, since the server clock is what makes
// instances with skewed clocks agree. Key TTLs are computed from the test
// clock but never shorter than one second, so that the real time between
// two steps of a test does not expire a key the test clock still holds.
// (Scripts treat a state whose test-clock expiry has passed as fresh, so a
// key that outlives its test-clock TTL changes no decision.)
func WithTestClock(clock func() time.Time) Option {
	return func(o *options) error {
		if clock == nil {
			return fmt.Errorf("redis: WithTestClock: nil clock")
		}
		o.testClock = clock
		if o.testTTLFloor == 0 {
			o.testTTLFloor = time.Second
		}
		return nil
	}
}

// WithProbeKey sets the key Open's probe writes and deletes to check that
// the scripts can run (default DefaultProbeKey, "fg:__probe"); give a key
// under your own prefix when the policy engine uses another one (an ACL
// key pattern must let it through). "" skips the probe.
func WithProbeKey(key string) Option {
	return func(o *options) error {
		o.probeKey = key
		return nil
	}
}

// WithWait makes every script call that writes (a take, a refund, a
// release, a renewal, the reservations and roll-backs of a take over
// several Cluster slots; not a peek nor Inspect, and not Reset, whose DEL
// is sent without WAIT) wait until replicas replicas have
// acknowledged its writes, for at most timeout: Redis' WAIT, sent right
// after the script on the same connection, so that it counts the script's
// writes. A batch of coalesced decisions is one script call and waits
// once (on a Cluster, one script call per hash slot it holds, each
// followed by its WAIT on its master, all at once). When fewer replicas acknowledge in time, a call that admitted, or
// gave back, returns an *AckError (store.ErrUnavailable): the write was
// made on the master and may be lost in a failover, so the failure policy
// answers it instead. A refused take is returned as refused, over several
// Cluster slots too when one of them refused: it admitted nothing that a
// failover could lose. A call that failed with an *AckError keeps what it
// charged on the master: while the replicas stay away, repeated failures
// spend the budget, and the refusals that follow wait for WAIT's timeout
// too (a refused take may write, e.g. a window's new start). Open does not
// count the replicas: Replicas does (floodgate serve calls it at start and
// warns). Each call holds a connection of the client's pool
// for blocking commands until WAIT answers; as many calls as that pool
// has connections (rueidis' BlockingPoolSize, 1024 by default) wait at
// once, the others for their turn within their context. replicas 0 turns
// WAIT off (the default); timeout must be from 1ms to 10s (it is rounded
// up to whole milliseconds) and at least 100 ms shorter than
// WithTimeout's (Redis answers a WAIT that timed out on its next cron
// tick). The store URL's wait_replicas and wait_timeout set it too (see
// ParseURL). See
// docs/STORES.md (Persistence) for what it guarantees in a failover and
// what it costs.
func WithWait(replicas int, timeout time.Duration) Option {
	return func(o *options) error {
		if replicas < 0 || replicas > maxWaitReplicas {
			return fmt.Errorf("redis: WithWait: replicas must be between 0 and %d, got %d", maxWaitReplicas, replicas)
		}
		if replicas > 0 && (timeout < time.Millisecond || timeout > maxWaitTimeout) {
			return fmt.Errorf("redis: WithWait: timeout must be between 1ms and %v, got %v", maxWaitTimeout, timeout)
		}
		o.waitReplicas, o.waitTimeout = replicas, waitMS(timeout)
		if replicas == 0 {
			o.waitTimeout = 0
		}
		return nil
	}
}
