package storeurl_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storeurl"
)

// openDegraded calls OpenRetrying on url, whose store cannot be used yet,
// and checks what the caller gets at once: a *Retrying store, without
// waiting for the store, whose calls fail with ErrNotOpen and say cause
// (the last attempt's error). It returns the store, the key it tried and
// the logs (from level on).
func openDegraded(t *testing.T, url, cause string, level slog.Level) (store.Store, string, *syncBuffer) {
	t.Helper()
	logs := new(syncBuffer)
	start := time.Now()
	st, err := storeurl.OpenRetrying(url, storeurl.WithTimeout(time.Second), storeurl.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond),
		storeurl.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level}))))
	if err != nil {
		t.Fatalf("OpenRetrying(%q) with the store not usable yet: %v", url, err)
	}
	t.Cleanup(func() { st.Close() })
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("OpenRetrying took %v: the caller waited for the store", d)
	}
	if _, ok := st.(*storeurl.Retrying); !ok {
		t.Fatalf("OpenRetrying(%q) = %T, want *storeurl.Retrying", url, st)
	}
	key := "fg:retrying:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	err = take(st, key, 1)
	if !errors.Is(err, storeurl.ErrNotOpen) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), cause) {
		t.Fatalf("Take before the store is usable: %v; want ErrNotOpen, store.ErrUnavailable and %q", err, cause)
	}
	return st, key, logs
}

// checkOpened waits for st to open, then checks that its decisions are
// the store's: a Take through st (waitOpened's) and one through another
// client of url are both counted, and the logs say the store opened.
func checkOpened(t *testing.T, st store.Store, url, key string, logs *syncBuffer, within time.Duration) {
	t.Helper()
	waitOpened(t, st, key, within)
	other, err := storeurl.Open(url, storeurl.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := take(other, key, 1); err != nil {
		t.Fatal(err)
	}
	out := make([]algo.Decision, 1)
	if err := st.Peek(context.Background(), []store.Request{{Key: key, Limit: retryLimit}}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Remaining != 98 {
		t.Errorf("Remaining after one Take here and one by another client = %d, want 98", out[0].Remaining)
	}
	if l := logs.String(); !strings.Contains(l, "store not opened at start") || !strings.Contains(l, `level=INFO msg="store opened"`) {
		t.Errorf("logs: want the WARN (not opened) and the INFO (opened), got:\n%s", l)
	}
}

// A Redis restarted with a data set answers LOADING until it has read it
// (here 3000 keys read at 1 ms each): OpenRetrying returns a store that
// says so, and that opens once the data set is loaded, with it.
func TestOpenRetryingRedisLoading(t *testing.T) {
	srv := testserver.NewRedis(t, "--enable-debug-command", "local",
		"--key-load-delay", "1000", "--loading-process-events-interval-bytes", "1024")
	if srv == nil {
		t.Skip("no redis-server")
	}
	for _, cmd := range [][]string{{"DEBUG", "POPULATE", "3000", "loaded"}, {"SAVE"}} {
		if _, err := testserver.RedisDo(srv.Addr, 10*time.Second, cmd...); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	restarted := make(chan error, 1)
	go func() { restarted <- srv.Restart() }() // returns once it answers PING: loaded
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := testserver.RedisDo(srv.Addr, time.Second, "PING")
		if err != nil && strings.HasPrefix(err.Error(), "LOADING ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted Redis never answered LOADING (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the process to start
	}
	url := "redis://" + srv.Addr
	st, key, logs := openDegraded(t, url, "LOADING Redis is loading the dataset in memory", slog.LevelInfo)
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	checkOpened(t, st, url, key, logs, 10*time.Second)
	if n, err := testserver.RedisDo(srv.Addr, time.Second, "DBSIZE"); err != nil || n != int64(3001) {
		t.Errorf("DBSIZE: %v %v, want the 3000 keys loaded and the decisions' one", n, err)
	}
}

// A Redis Cluster whose nodes are all down at start: OpenRetrying returns
// at once, and the store opens once the nodes are back and the cluster is
// whole.
func TestOpenRetryingRedisClusterDown(t *testing.T) {
	c := testserver.NewRedisCluster(t)
	if c == nil {
		t.Skip("no redis-server")
	}
	for _, n := range c.Nodes {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	url := "redis-cluster://" + strings.Join(c.Addrs(), ",")
	st, key, logs := openDegraded(t, url, "connection refused", slog.LevelInfo)
	for _, n := range c.Nodes {
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkOpened(t, st, url, key, logs, 30*time.Second)
	master, err := c.MasterFor(key)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testserver.RedisDo(master.Addr, time.Second, "EXISTS", key); err != nil || n != int64(1) {
		t.Errorf("EXISTS %s on its master %s: %v %v, want 1", key, master.Addr, n, err)
	}
}

// A Sentinel set whose sentinels are all down at start (the master up):
// OpenRetrying returns at once, and the store opens on the master once the
// sentinels are back.
func TestOpenRetryingRedisSentinelsDown(t *testing.T) {
	s := testserver.NewRedisSentinel(t)
	if s == nil {
		t.Skip("no redis-server")
	}
	for _, sn := range s.Sentinels {
		if err := sn.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	url := "redis-sentinel://" + s.MasterName + "@" + strings.Join(s.Addrs(), ",")
	st, key, logs := openDegraded(t, url, "connection refused", slog.LevelInfo)
	for _, sn := range s.Sentinels {
		if err := sn.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	checkOpened(t, st, url, key, logs, 30*time.Second)
	if n, err := testserver.RedisDo(s.Master.Addr, time.Second, "EXISTS", key); err != nil || n != int64(1) {
		t.Errorf("EXISTS %s on the master %s: %v %v, want 1", key, s.Master.Addr, n, err)
	}
}

// A store that comes back but refuses the user (here: its ACL, not
// persisted, lost the user on the restart) is retried all the same, said
// at WARN once for that cause however many attempts fail with it, and
// opens once the user is back.
func TestOpenRetryingRefusedAfterStart(t *testing.T) {
	srv := testserver.NewRedis(t)
	if srv == nil {
		t.Skip("no redis-server")
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	url := "redis://floodgate:right-password@" + srv.Addr
	// At DEBUG: the test reads the records of the failed retries.
	st, key, logs := openDegraded(t, url, "connection refused", slog.LevelDebug)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	const refused = `msg="store answers but cannot be used; retrying"`
	deadline := time.Now().Add(10 * time.Second)
	for {
		l := logs.String()
		if i := strings.Index(l, refused); i >= 0 && strings.Count(l[i:], "WRONGPASS") >= 2 {
			break // refused twice for the same cause
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two refused retries after 10s; logs:\n%s", l)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the retry loop
	}
	if err := take(st, key, 1); !errors.Is(err, storeurl.ErrNotOpen) || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("Take while the user is refused: %v, want ErrNotOpen and WRONGPASS", err)
	}
	if _, err := testserver.RedisDo(srv.Addr, time.Second, "ACL", "SETUSER", "floodgate", "on", ">right-password", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	checkOpened(t, st, url, key, logs, 10*time.Second)
	if n := strings.Count(logs.String(), refused); n != 1 {
		t.Errorf("%d WARN records of the refusal, want 1 (once a cause):\n%s", n, logs.String())
	}
}
