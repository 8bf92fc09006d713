package testserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// SentinelMasterName is the master name monitored by StartRedisSentinel's sentinels.
	SentinelMasterName = "mymaster"
	// SentinelDownAfter is the sentinels' down-after-milliseconds: a killed master is
	// failed over roughly this long after it dies. Not shorter: a sentinel that misses
	// its timer for 2 s (a stalled VM) enters TILT mode for 30 s, and a replica whose
	// link to the master has been down longer than ten times this is no longer promoted
	// (-failover-abort-no-good-slave). At 2 s a stall during the failover test left no
	// replica to promote; at 5 s one survives a whole TILT period.
	SentinelDownAfter = 5 * time.Second

	sentinelCount   = 3
	sentinelTimeout = 30 * time.Second
)

// Sentinel is a Redis Sentinel set started by StartRedisSentinel: one master, one replica
// and three sentinels (quorum 2) monitoring the master as MasterName.
// Roles change on failover: ask the sentinels (MasterAddr) for the current master.
type Sentinel struct {
	MasterName string
	Master     *Server // the initial master
	Replica    *Server // the initial replica
	Sentinels  []*Server
	Dir        string
}

// StartRedisSentinel starts a master, a replica of it and three sentinels
// (redis-server sentinel.conf --sentinel) on free ports, and waits until the replica is in
// sync and every sentinel knows the master, the replica and the two other sentinels.
// The caller must Stop it (defer s.Stop()). If redis-server is not installed the error is
// a *MissingBinaryError.
func StartRedisSentinel() (*Sentinel, error) {
	if _, err := lookBinary("redis-server"); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "floodgate-redis-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	set := &Sentinel{MasterName: SentinelMasterName, Dir: dir}
	fail := func(err error) (*Sentinel, error) {
		err = fmt.Errorf("%w\n%s", err, set.logs(4<<10))
		set.Stop()
		return nil, err
	}

	if set.Master, err = startServer(redisSpec("redis", filepath.Join(dir, "master"), false)); err != nil {
		return fail(err)
	}
	if set.Replica, err = startServer(redisSpec("redis", filepath.Join(dir, "replica"), false,
		"--replicaof", "127.0.0.1", strconv.Itoa(set.Master.Port))); err != nil {
		return fail(err)
	}
	// The sentinels learn about the replica from the master's INFO, so it must be attached
	// before they start.
	if err := waitFor("redis replica in sync", sentinelTimeout, 50*time.Millisecond, func() error {
		return replicaLinkUp(set.Replica.Addr)
	}); err != nil {
		return fail(err)
	}

	set.Sentinels = make([]*Server, sentinelCount)
	errs := make([]error, sentinelCount)
	var wg sync.WaitGroup
	for i := range set.Sentinels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			set.Sentinels[i], errs[i] = startServer(sentinelSpec(filepath.Join(dir, "sentinel"+strconv.Itoa(i)), set.Master.Port))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if err := waitFor("redis sentinels discovery", sentinelTimeout, 100*time.Millisecond, set.checkDiscovered); err != nil {
		return fail(err)
	}
	return set, nil
}

func sentinelSpec(dir string, masterPort int) serverSpec {
	return serverSpec{
		kind: "redis-sentinel",
		bin:  "redis-server",
		dir:  dir,
		args: func(dir string, port int) ([]string, error) {
			conf := filepath.Join(dir, "sentinel.conf")
			text := fmt.Sprintf(`port %d
bind 127.0.0.1
daemonize no
dir %q
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s %[5]d
sentinel failover-timeout %[3]s 10000
sentinel parallel-syncs %[3]s 1
`, port, dir, SentinelMasterName, masterPort, SentinelDownAfter/time.Millisecond)
			// Sentinel rewrites its config file, so it must be writable (and fresh on retry).
			if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
				return nil, fmt.Errorf("testserver: %w", err)
			}
			return []string{conf, "--sentinel"}, nil
		},
		probe: pingRedis,
	}
}

// checkDiscovered returns nil once every sentinel knows the master, the replica and the
// other sentinels.
func (s *Sentinel) checkDiscovered() error {
	for _, sn := range s.Sentinels {
		v, err := RedisDo(sn.Addr, probeTimeout, "SENTINEL", "get-master-addr-by-name", s.MasterName)
		if err != nil {
			return err
		}
		if a, ok := v.([]any); !ok || len(a) != 2 || fmt.Sprint(a[0])+":"+fmt.Sprint(a[1]) != s.Master.Addr {
			return fmt.Errorf("sentinel %s: master is %v, want %s", sn.Addr, v, s.Master.Addr)
		}
		v, err = RedisDo(sn.Addr, probeTimeout, "SENTINEL", "replicas", s.MasterName)
		if err != nil {
			return err
		}
		if a, ok := v.([]any); !ok || len(a) < 1 {
			return fmt.Errorf("sentinel %s knows no replica yet", sn.Addr)
		}
		v, err = RedisDo(sn.Addr, probeTimeout, "SENTINEL", "sentinels", s.MasterName)
		if err != nil {
			return err
		}
		if a, ok := v.([]any); !ok || len(a) < sentinelCount-1 {
			return fmt.Errorf("sentinel %s knows %d other sentinels, want %d", sn.Addr, len(a), sentinelCount-1)
		}
	}
	return nil
}

// Addrs returns the sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	out := make([]string, 0, len(s.Sentinels))
	for _, sn := range s.Sentinels {
		if sn != nil {
			out = append(out, sn.Addr)
		}
	}
	return out
}

// Servers returns every server of the set: master, replica, then the sentinels.
func (s *Sentinel) Servers() []*Server {
	var out []*Server
	for _, sv := range append([]*Server{s.Master, s.Replica}, s.Sentinels...) {
		if sv != nil {
			out = append(out, sv)
		}
	}
	return out
}

// MasterAddr asks the running sentinels for the current master's address
// (SENTINEL get-master-addr-by-name) and returns the first answer.
func (s *Sentinel) MasterAddr() (string, error) {
	var lastErr error = errors.New("testserver: no sentinel is running")
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		v, err := RedisDo(sn.Addr, probeTimeout, "SENTINEL", "get-master-addr-by-name", s.MasterName)
		if err != nil {
			lastErr = err
			continue
		}
		if a, ok := v.([]any); ok && len(a) == 2 {
			return fmt.Sprint(a[0]) + ":" + fmt.Sprint(a[1]), nil
		}
		lastErr = fmt.Errorf("testserver: sentinel %s: unexpected reply %#v", sn.Addr, v)
	}
	return "", lastErr
}

// Stop stops every server of the set and removes its directory. Idempotent.
func (s *Sentinel) Stop() error {
	// Sentinels first, so that they do not fail over while the master goes away.
	err := stopAll(s.Sentinels)
	err = errors.Join(err, stopAll([]*Server{s.Master, s.Replica}))
	os.RemoveAll(s.Dir)
	return err
}

func (s *Sentinel) logs(per int64) string {
	var b strings.Builder
	for _, sv := range s.Servers() {
		fmt.Fprintf(&b, "--- %s %s (%s) ---\n%s", sv.Kind, sv.Addr, sv.LogPath, sv.logTail(per))
	}
	return b.String()
}

// SentinelSpec formats a master name and sentinel addresses as in FLOODGATE_TEST_REDIS_SENTINEL:
// "master@host:port,host:port,...".
func SentinelSpec(master string, sentinels []string) string {
	return master + "@" + strings.Join(sentinels, ",")
}

// ParseSentinelSpec parses "master@host:port,host:port,..." (the format of
// FLOODGATE_TEST_REDIS_SENTINEL).
func ParseSentinelSpec(v string) (master string, sentinels []string, err error) {
	master, list, ok := strings.Cut(strings.TrimSpace(v), "@")
	master = strings.TrimSpace(master)
	if !ok || master == "" {
		return "", nil, fmt.Errorf("testserver: %q: want master@host:port,host:port,...", v)
	}
	sentinels = splitAddrs(list)
	if len(sentinels) == 0 {
		return "", nil, fmt.Errorf("testserver: %q: no sentinel address after @", v)
	}
	return master, sentinels, nil
}

// splitAddrs splits a comma-separated address list, dropping blanks.
func splitAddrs(v string) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
