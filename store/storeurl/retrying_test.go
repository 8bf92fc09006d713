package storeurl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/storeurl"
)

// syncBuffer is a log destination read while the retry loop writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTransient(t *testing.T) {
	for _, r := range []struct {
		url  string
		want bool
	}{
		{"redis://127.0.0.1:1", true},
		{"redis-cluster://127.0.0.1:1", true},
		{"redis-sentinel://m@127.0.0.1:1", true},
		{"memcached://127.0.0.1:1", true},
		{"redis://h:99999", false},
		{"memcached://", false},
		{"postgres://db:5432", false},
	} {
		_, err := storeurl.Open(r.url)
		if err == nil {
			t.Fatalf("Open(%q) = nil error", r.url)
		}
		if got := storeurl.Transient(err); got != r.want {
			t.Errorf("Transient(Open(%q)) = %v, want %v (%v)", r.url, got, r.want, err)
		}
	}
	if storeurl.Transient(nil) {
		t.Error("Transient(nil) = true")
	}
}

// retryLimit refills one unit every 864 s, so the tests' counts cannot
// change between two takes however their instants fall (a fixed window's
// boundary between them made Remaining 99, not 98, in CI).
var retryLimit, _ = algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 100, Period: 24 * time.Hour})

// take charges cost on key and returns the store's error.
func take(st store.Store, key string, cost int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := st.Take(ctx, []store.Request{{Key: key, Limit: retryLimit, Cost: cost}}, make([]algo.Decision, 1))
	return err
}

// waitOpened takes on st until it stops failing with ErrNotOpen.
func waitOpened(t *testing.T, st store.Store, key string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := take(st, key, 1)
		if err == nil {
			return
		}
		if !errors.Is(err, storeurl.ErrNotOpen) || time.Now().After(deadline) {
			t.Fatalf("Take after the store came back: %v (after %v)", err, within)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the retry loop, not for math
	}
}

// A store down at start: OpenRetrying returns a store that fails with
// ErrNotOpen (store.ErrUnavailable), opens it once it is back, and shares
// its counts with any other client.
func TestOpenRetrying(t *testing.T) {
	for name, start := range map[string]func(t *testing.T) (url string, down, up func() error){
		"redis": func(t *testing.T) (string, func() error, func() error) {
			s := testserver.NewRedis(t)
			return "redis://" + s.Addr, s.Kill, s.Restart
		},
		// A ring of which one server answers opens on it
		// (TestOpenRetryingMemcachedOneDown); one of none is retried.
		"memcached": func(t *testing.T) (string, func() error, func() error) {
			a := testserver.NewMemcached(t)
			return "memcached://" + a.Addr, a.Kill, a.Restart
		},
	} {
		t.Run(name, func(t *testing.T) {
			url, down, up := start(t)
			if err := down(); err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			st, err := storeurl.OpenRetrying(url, storeurl.WithRetryBackoff(20*time.Millisecond, 200*time.Millisecond),
				storeurl.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))
			if err != nil {
				t.Fatalf("OpenRetrying with the store down: %v", err)
			}
			defer st.Close()
			if _, ok := st.(*storeurl.Retrying); !ok {
				t.Fatalf("OpenRetrying with the store down = %T, want *storeurl.Retrying", st)
			}
			key := "fg:retrying:" + strconv.FormatInt(time.Now().UnixNano(), 36)
			err = take(st, key, 1)
			if !errors.Is(err, storeurl.ErrNotOpen) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("Take before the store is up: %v, want ErrNotOpen, store.ErrUnavailable and the cause", err)
			}
			if _, _, err := st.(store.Inspector).Inspect(context.Background(), key); !errors.Is(err, storeurl.ErrNotOpen) {
				t.Errorf("Inspect before the store is up: %v, want ErrNotOpen", err)
			}
			if u := st.(interface{ Unwrap() store.Store }).Unwrap(); u != nil {
				t.Errorf("Unwrap before the store is up = %T, want nil", u)
			}
			time.Sleep(100 * time.Millisecond) // a few failed retries, logged once
			if err := up(); err != nil {
				t.Fatal(err)
			}
			waitOpened(t, st, key, 5*time.Second)

			other, err := storeurl.Open(url)
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
			if st.(interface{ Unwrap() store.Store }).Unwrap() == nil {
				t.Error("Unwrap after opening = nil")
			}
			if err := st.(store.Renewer).Renew(context.Background(), []store.Request{{Key: key, Limit: retryLimit}}); err != nil {
				t.Errorf("Renew after opening: %v", err)
			}
			l := logs.String()
			if strings.Count(l, "level=WARN") != 1 || !strings.Contains(l, "store not opened at start") ||
				!strings.Contains(l, "level=INFO msg=\"store opened\"") {
				t.Errorf("logs: want one WARN (not opened) and an INFO (opened), got:\n%s", l)
			}
		})
	}
}

// Errors that would not pass are returned at once, as Open's: a replica
// behind redis:// and a wrong password.
func TestOpenRetryingFatal(t *testing.T) {
	master := testserver.NewRedis(t)
	replica := testserver.NewRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	if _, err := testserver.RedisDo(master.Addr, time.Second, "ACL", "SETUSER", "floodgate", "on", ">right-password", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	for _, r := range []struct{ url, want string }{
		{"redis://" + replica.Addr, "read-only replica"},
		{"redis://floodgate:wrong-password@" + master.Addr, "WRONGPASS"},
	} {
		st, err := storeurl.OpenRetrying(r.url, storeurl.WithRetryBackoff(10*time.Millisecond, 10*time.Millisecond))
		if err == nil {
			st.Close()
			t.Errorf("OpenRetrying(%q) = %T, want an error", r.url, st)
			continue
		}
		if !strings.Contains(err.Error(), r.want) || storeurl.Transient(err) {
			t.Errorf("OpenRetrying(%q): %v, want %q, not transient", r.url, err, r.want)
		}
	}
	waitGoroutines(t, before)
}

// Close during the retries returns at once and leaves no goroutine.
func TestRetryingClose(t *testing.T) {
	before := runtime.NumGoroutine()
	st, err := storeurl.OpenRetrying("redis://127.0.0.1:1", storeurl.WithRetryBackoff(time.Hour, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := take(st, "k", 1); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Take after Close: %v, want store.ErrClosed", err)
	}
	waitGoroutines(t, before)
}

// waitGoroutines fails unless the goroutine count comes back to at most n
// within a second (goroutines of the runtime and of other tests' cleanups
// may take a moment to exit).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ExampleOpenRetrying() {
	// A store down at start: serve on the failure policy meanwhile.
	st, err := storeurl.OpenRetrying("redis://127.0.0.1:1", storeurl.WithRetryBackoff(time.Hour, time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_, err = st.Take(context.Background(), []store.Request{{Key: "k", Limit: retryLimit, Cost: 1}}, make([]algo.Decision, 1))
	fmt.Println(errors.Is(err, storeurl.ErrNotOpen), errors.Is(err, store.ErrUnavailable))
	// Output: true true
}
