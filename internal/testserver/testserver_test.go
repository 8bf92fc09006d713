package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mustDo(t *testing.T, addr string, args ...string) any {
	t.Helper()
	v, err := RedisDo(addr, 5*time.Second, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

func TestRedis(t *testing.T) {
	t.Parallel()
	s := NewRedis(t)
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Fatalf("Addr = %q, want 127.0.0.1:port", s.Addr)
	}
	if got := mustDo(t, s.Addr, "PING"); got != "PONG" {
		t.Fatalf("PING = %#v", got)
	}
	mustDo(t, s.Addr, "SET", "k", "v")
	if got := mustDo(t, s.Addr, "GET", "k"); got != "v" {
		t.Fatalf("GET = %#v", got)
	}
	if got := mustDo(t, s.Addr, "GET", "missing"); got != nil {
		t.Fatalf("GET missing = %#v", got)
	}
	if got := mustDo(t, s.Addr, "INCR", "n"); got != int64(1) {
		t.Fatalf("INCR = %#v", got)
	}
	if _, err := RedisDo(s.Addr, time.Second, "NOSUCHCOMMAND"); !errors.As(err, new(RedisError)) {
		t.Fatalf("unknown command: err = %v, want RedisError", err)
	}
	// Persistence is off and only loopback is bound.
	if got := mustDo(t, s.Addr, "CONFIG", "GET", "save"); fmt.Sprint(got) != "[save ]" {
		t.Errorf("save = %v", got)
	}
	if got := mustDo(t, s.Addr, "CONFIG", "GET", "bind"); fmt.Sprint(got) != "[bind 127.0.0.1]" {
		t.Errorf("bind = %v", got)
	}
}

func TestRedisFromEnvIsReturnedAsIs(t *testing.T) {
	t.Setenv(EnvRedis, "example.invalid:1")
	t.Setenv(EnvRedisCluster, " a:1, b:2,,c:3 ")
	t.Setenv(EnvRedisSentinel, "mymaster@s1:1,s2:2,s3:3")
	t.Setenv(EnvMemcached, "example.invalid:2")
	if got := Redis(t); got != "example.invalid:1" {
		t.Errorf("Redis = %q", got)
	}
	if got := fmt.Sprint(RedisCluster(t)); got != "[a:1 b:2 c:3]" {
		t.Errorf("RedisCluster = %s", got)
	}
	m, s := RedisSentinel(t)
	if m != "mymaster" || fmt.Sprint(s) != "[s1:1 s2:2 s3:3]" {
		t.Errorf("RedisSentinel = %q %v", m, s)
	}
	if got := Memcached(t); got != "example.invalid:2" {
		t.Errorf("Memcached = %q", got)
	}
}

func TestParseSentinelSpec(t *testing.T) {
	for _, bad := range []string{"", "mymaster", "@a:1", "mymaster@", "mymaster@ , "} {
		if _, _, err := ParseSentinelSpec(bad); err == nil {
			t.Errorf("ParseSentinelSpec(%q): no error", bad)
		}
	}
	m, s, err := ParseSentinelSpec(SentinelSpec("m", []string{"a:1", "b:2"}))
	if err != nil || m != "m" || fmt.Sprint(s) != "[a:1 b:2]" {
		t.Errorf("round trip = %q %v %v", m, s, err)
	}
}

func TestRedisKillRestart(t *testing.T) {
	t.Parallel()
	s := NewRedis(t)
	pid := s.PID()
	if !processAlive(pid) {
		t.Fatalf("pid %d not alive", pid)
	}
	mustDo(t, s.Addr, "SET", "k", "v")

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if s.Running() || s.PID() != 0 {
		t.Fatalf("still running after Kill")
	}
	if processAlive(pid) {
		t.Fatalf("pid %d alive after Kill", pid)
	}
	if err := pingRedis(s.Addr, 200*time.Millisecond); err == nil {
		t.Fatalf("PING succeeded after Kill")
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.PID() == 0 || s.PID() == pid {
		t.Fatalf("PID after Restart = %d (before %d)", s.PID(), pid)
	}
	if got := mustDo(t, s.Addr, "PING"); got != "PONG" {
		t.Fatalf("PING after Restart = %#v", got)
	}
	// No persistence: the data is gone, as after a real crash without AOF/RDB.
	if got := mustDo(t, s.Addr, "GET", "k"); got != nil {
		t.Errorf("GET after restart = %#v, want nil", got)
	}

	// Restart of a running server works too (graceful stop, same port).
	pid = s.PID()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("old pid %d alive after Restart", pid)
	}
	mustDo(t, s.Addr, "PING")

	// Stop is final and removes the directory.
	pid = s.PID()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("pid %d alive after Stop", pid)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("dir %s still there after Stop: %v", s.Dir, err)
	}
	if err := s.Restart(); err == nil {
		t.Errorf("Restart after Stop succeeded")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestRedisPauseResume(t *testing.T) {
	t.Parallel()
	s := NewRedis(t)
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := pingRedis(s.Addr, 200*time.Millisecond); err == nil {
		t.Fatalf("PING answered while paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := pingRedis(s.Addr, 5*time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	// Stopping a paused server must not hang.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Stop of a paused server took %v", d)
	}
}

func TestStartRedisWithoutTB(t *testing.T) {
	t.Parallel()
	s, err := StartRedisArgs("--maxmemory", "12mb")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if got := mustDo(t, s.Addr, "CONFIG", "GET", "maxmemory"); fmt.Sprint(got) != "[maxmemory 12582912]" {
		t.Errorf("maxmemory = %v", got)
	}
	// A second server gets another port.
	s2, err := StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	if s2.Addr == s.Addr {
		t.Fatalf("two servers on %s", s.Addr)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	addrs := RedisCluster(t)
	if len(addrs) != 6 {
		t.Fatalf("RedisCluster returned %d addresses: %v", len(addrs), addrs)
	}
	// Parse CLUSTER NODES from every node over a raw RESP connection.
	for _, addr := range addrs {
		c, err := DialRESP(addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Do("CLUSTER", "NODES")
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := ParseClusterNodes(v.(string))
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 6 {
			t.Fatalf("%s sees %d nodes", addr, len(nodes))
		}
		ids := map[string]ClusterNode{}
		for _, n := range nodes {
			ids[n.ID] = n
		}
		masters, replicas, slots := 0, 0, 0
		for _, n := range nodes {
			if n.Failing() {
				t.Errorf("%s sees %s failing: %v", addr, n.Addr, n.Flags)
			}
			switch {
			case n.IsMaster():
				masters++
				slots += n.SlotCount()
			case n.IsReplica():
				replicas++
				if m, ok := ids[n.MasterID]; !ok || !m.IsMaster() {
					t.Errorf("%s: replica %s has master %q which is not a master", addr, n.Addr, n.MasterID)
				}
			}
		}
		if masters != 3 || replicas != 3 || slots != ClusterSlots {
			t.Errorf("%s sees %d masters, %d replicas, %d slots; want 3, 3, %d", addr, masters, replicas, slots, ClusterSlots)
		}
	}
	// A key written through its master is readable there.
	v, err := RedisDo(addrs[0], 5*time.Second, "SET", "{k}x", "1")
	var moved RedisError
	if err != nil && !(errors.As(err, &moved) && strings.HasPrefix(string(moved), "MOVED ")) {
		t.Fatalf("SET: %v %v", v, err)
	}
}

func TestRedisClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover takes several seconds")
	}
	t.Parallel()
	c := NewRedisCluster(t)
	masters, err := c.Masters()
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := c.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	if len(masters) != 3 || len(replicas) != 3 {
		t.Fatalf("masters %v replicas %v", masters, replicas)
	}
	victim, err := c.MasterFor("some-key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RedisDo(victim.Addr, 5*time.Second, "SET", "some-key", "v"); err != nil {
		t.Fatal(err)
	}
	pid := victim.PID()
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) {
		t.Fatalf("killed master pid %d still alive", pid)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	promoted, err := c.MasterFor("some-key")
	if err != nil {
		t.Fatal(err)
	}
	if promoted == victim {
		t.Fatalf("killed master %s still serves the key", victim.Addr)
	}
	// The old master comes back as a replica.
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	replicas, err = c.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	if len(replicas) != 3 {
		t.Errorf("after restart: %d replicas", len(replicas))
	}
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	// With FLOODGATE_TEST_REDIS_SENTINEL set this checks the shared set, else a private one.
	master, sentinels := RedisSentinel(t)
	if master == "" || len(sentinels) != 3 {
		t.Fatalf("RedisSentinel = %q %v", master, sentinels)
	}
	var masterAddr string
	for _, a := range sentinels {
		if got := mustDo(t, a, "PING"); got != "PONG" {
			t.Fatalf("sentinel %s PING = %#v", a, got)
		}
		got, ok := mustDo(t, a, "SENTINEL", "get-master-addr-by-name", master).([]any)
		if !ok || len(got) != 2 {
			t.Fatalf("sentinel %s: get-master-addr-by-name = %#v", a, got)
		}
		addr := fmt.Sprint(got[0]) + ":" + fmt.Sprint(got[1])
		if masterAddr != "" && addr != masterAddr {
			t.Errorf("sentinels disagree on the master: %s vs %s", addr, masterAddr)
		}
		masterAddr = addr
		if n := len(mustDo(t, a, "SENTINEL", "sentinels", master).([]any)); n != 2 {
			t.Errorf("sentinel %s knows %d other sentinels", a, n)
		}
		if n := len(mustDo(t, a, "SENTINEL", "replicas", master).([]any)); n != 1 {
			t.Errorf("sentinel %s knows %d replicas", a, n)
		}
	}
	if got := mustDo(t, masterAddr, "ROLE"); fmt.Sprint(got.([]any)[0]) != "master" {
		t.Errorf("master ROLE = %v", got)
	}
}

func TestNewRedisSentinel(t *testing.T) {
	t.Parallel()
	set := NewRedisSentinel(t)
	if set.MasterName != SentinelMasterName || len(set.Addrs()) != 3 || len(set.Servers()) != 5 {
		t.Fatalf("set = %+v", set)
	}
	if addr, err := set.MasterAddr(); err != nil || addr != set.Master.Addr {
		t.Fatalf("MasterAddr = %q, %v; want %s", addr, err, set.Master.Addr)
	}
	if got := mustDo(t, set.Replica.Addr, "ROLE"); fmt.Sprint(got.([]any)[0]) != "slave" {
		t.Errorf("replica ROLE = %v", got)
	}
}

func TestRedisSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover takes several seconds")
	}
	t.Parallel()
	set := NewRedisSentinel(t)
	if err := set.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	err := waitFor("sentinel failover", 30*time.Second, 100*time.Millisecond, func() error {
		addr, err := set.MasterAddr()
		if err != nil {
			return err
		}
		if addr != set.Replica.Addr {
			return fmt.Errorf("master is %s", addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, set.Replica.Addr, "ROLE"); fmt.Sprint(got.([]any)[0]) != "master" {
		t.Errorf("promoted replica ROLE = %v", got)
	}
}

func TestMemcached(t *testing.T) {
	t.Parallel()
	addr := Memcached(t)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	io.WriteString(c, "set k 0 0 1\r\nv\r\nget k\r\nversion\r\n")
	var lines []string
	for range 5 {
		line, err := readLine(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	want := "STORED|VALUE k 0 1|v|END|VERSION "
	if got := strings.Join(lines, "|"); !strings.HasPrefix(got, want) {
		t.Errorf("memcached replies %q, want prefix %q", got, want)
	}
}

func TestMemcachedKillRestart(t *testing.T) {
	t.Parallel()
	s := NewMemcached(t)
	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid) || pingMemcached(s.Addr, 200*time.Millisecond) == nil {
		t.Fatalf("memcached alive after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := pingMemcached(s.Addr, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// fakeTB records Skipf/Fatalf instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	skipped, fatal string
	cleanups       []func()
}

func (f *fakeTB) Helper()                         {}
func (f *fakeTB) Skipf(format string, a ...any)   { f.skipped = fmt.Sprintf(format, a...) }
func (f *fakeTB) Fatalf(format string, a ...any)  { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Cleanup(fn func())               { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Failed() bool                    { return f.fatal != "" }
func (f *fakeTB) Logf(format string, args ...any) {}

func TestMissingBinary(t *testing.T) {
	// Not parallel: it changes the environment. The helpers must start servers, not return
	// the shared ones exported by scripts/test.sh.
	for _, k := range []string{EnvRedis, EnvRedisCluster, EnvRedisSentinel, EnvMemcached} {
		t.Setenv(k, "")
	}
	t.Setenv("PATH", t.TempDir())

	_, err := StartRedis()
	var mb *MissingBinaryError
	if !errors.As(err, &mb) || mb.Binary != "redis-server" || mb.Package != "redis-server" {
		t.Fatalf("StartRedis err = %v", err)
	}
	if _, err := StartRedisCluster(); !errors.As(err, &mb) || mb.Binary != "redis-cli" || mb.Package != "redis-tools" {
		t.Fatalf("StartRedisCluster err = %v", err)
	}
	if _, err := StartMemcached(); !errors.As(err, &mb) || mb.Package != "memcached" {
		t.Fatalf("StartMemcached err = %v", err)
	}

	t.Setenv("CI", "")
	f := &fakeTB{TB: t}
	if addr := Redis(f); addr != "" || f.fatal != "" || !strings.Contains(f.skipped, "redis-server") ||
		!strings.Contains(f.skipped, "apt-get install -y redis-server") {
		t.Errorf("without CI: addr %q skipped %q fatal %q", addr, f.skipped, f.fatal)
	}

	t.Setenv("CI", "true")
	f = &fakeTB{TB: t}
	if addr := Memcached(f); addr != "" || f.skipped != "" || !strings.Contains(f.fatal, "memcached") {
		t.Errorf("with CI: addr %q skipped %q fatal %q", addr, f.skipped, f.fatal)
	}
	f = &fakeTB{TB: t}
	if m, s := RedisSentinel(f); m != "" || s != nil || !strings.Contains(f.fatal, "redis-server") {
		t.Errorf("with CI: sentinel %q %v fatal %q", m, s, f.fatal)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	_, err := StartRedisArgs("--no-such-option", "1")
	if err == nil {
		t.Fatal("started with a bad option")
	}
	if !strings.Contains(err.Error(), "no-such-option") || !strings.Contains(err.Error(), "--- ") {
		t.Errorf("error does not show the log: %v", err)
	}
}

func TestParseClusterNodes(t *testing.T) {
	text := "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n" +
		"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922\n" +
		"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]\n" +
		"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 disconnected 10923-16383 16000\n"
	nodes, err := ParseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("%d nodes", len(nodes))
	}
	n := nodes[0]
	if n.Addr != "127.0.0.1:30004" || !n.IsReplica() || n.MasterID != "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca" || !n.Connected {
		t.Errorf("replica parsed as %+v", n)
	}
	if n := nodes[2]; !n.HasFlag("myself") || n.SlotCount() != 5461 || len(n.Slots) != 1 || n.MasterID != "" {
		t.Errorf("myself parsed as %+v", n)
	}
	if n := nodes[3]; !n.Failing() || n.Connected || !n.ServesSlot(16383) || n.ServesSlot(0) {
		t.Errorf("failed master parsed as %+v", n)
	}
	if _, err := ParseClusterNodes("garbage line\n"); err == nil {
		t.Error("no error on garbage")
	}
}

func TestStartRetriesWhenPortIsTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	calls := 0
	spec := redisSpec("redis", "", false)
	args := spec.args
	spec.args = func(dir string, port int) ([]string, error) {
		calls++
		if calls == 1 {
			port = taken // as if another process grabbed the port meanwhile
		}
		return args(dir, port)
	}
	s, err := startServer(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if calls != 2 || s.Port == taken {
		t.Errorf("calls = %d, port %d (taken %d)", calls, s.Port, taken)
	}
	if err := pingRedis(s.Addr, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
