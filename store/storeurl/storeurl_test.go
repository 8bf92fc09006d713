package storeurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/storeurl"
)

func TestBadURLs(t *testing.T) {
	for _, r := range []struct{ url, want string }{
		{"", "missing scheme"},
		{"localhost:6379", "missing scheme"},
		{"redis:/h:6379", `"redis:" must be followed by ://`},
		{"memcached:h:11211", `"memcached:" must be followed by ://`},
		{"postgres://db:5432", `unknown scheme "postgres"`},
		{"memory://somewhere", "takes no host"},
		{"memory://?max_keys=lots", `max_keys="lots"`},
		{"memory://?colour=blue", `unknown parameter "colour"`},
		{"memory://?shards=1000000", "shards"},
		{"redis://", "missing host"},
		{"redis://h:99999", "port"},
		{"redis://h:1,h:2", "one host"},
		{"redis://h:1/x", "database"},
		{"redis-cluster://h:1/0", "no database"},
		{"redis-sentinel://h:1", "master"},
		{"memcached://", "no server"},
		{"memcached://h:1,,h:2", "empty"},
		{"memcached://h:1/path", "unexpected"},
		{"redis://user:s3cret@h:99999", "xxxxx"},
		{"memcacheds:h:11211", `"memcacheds:" must be followed by ://`},
		{"memcacheds://", "no server"},
		{"memcacheds://h:1,h:1", "listed twice"},
		{"memcacheds://h:1?ca=/etc/ca.pem", "query parameters"},
		{"memcacheds://user:s3cret@h:1", `"memcacheds://xxxxx@h:1": memcacheds takes no user name or password`},
		{"MEMCACHEDS://s3cret@h:1", "takes no user name or password"},
	} {
		st, err := storeurl.Open(r.url)
		if err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded", r.url)
			continue
		}
		if !errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("Open(%q) = %v, want ErrBadURL saying %q", r.url, err, r.want)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error shows the password: %v", r.url, err)
		}
	}
}

// TestBadURLSaysItOnce: a URL error names the problem once, the URL once
// (password hidden), and keeps the store package's error for errors.Is.
func TestBadURLSaysItOnce(t *testing.T) {
	for _, r := range []struct {
		url, shown, reason string
		pkgErr             error
	}{
		{"redis://h:99999", "redis://h:99999", `address "h:99999": port must be 1-65535, got "99999"`, redis.ErrBadURL},
		{"redis://u:s3cret@h:99999", "redis://u:xxxxx@h:99999", `address "h:99999": port must be 1-65535, got "99999"`, redis.ErrBadURL},
		{"rediss://h:1/x", "rediss://h:1/x", `database must be a non-negative integer in decimal digits (no sign), got "x"`, redis.ErrBadURL},
		{"redis-cluster://h:99999", "redis-cluster://h:99999", `address "h:99999": port must be 1-65535, got "99999"`, redis.ErrBadURL},
		{"redis-cluster://", "redis-cluster://", "missing host", redis.ErrBadURL},
		{"redis-sentinel://h:26379", "redis-sentinel://h:26379", "missing master name (want redis-sentinel://master@host:port,...)", redis.ErrBadURL},
		{"memcached://h:99999", "memcached://h:99999", `server "h:99999": port must be 1-65535, got "99999"`, nil},
		{"memcached://", "memcached://", "no server", nil},
		{"memcacheds://h:99999", "memcacheds://h:99999", `server "h:99999": port must be 1-65535, got "99999"`, nil},
		{"memcacheds://h:1/0", "memcacheds://h:1/0", `unexpected path "/0": only a list of host:port is allowed`, nil},
		{"memory://x", "memory://x", `memory:// takes no host or path, got "x"`, nil},
		{"postgres://db", "postgres://db", `unknown scheme "postgres": want one of memory://, redis://, rediss://, redis-cluster://, redis-sentinel://, memcached://, memcacheds://`, nil},
	} {
		_, err := storeurl.Open(r.url)
		ue, ok := errors.AsType[*storeurl.URLError](err)
		if !ok {
			t.Errorf("Open(%q) = %v, want a *URLError", r.url, err)
			continue
		}
		if ue.URL != r.shown || ue.Reason != r.reason {
			t.Errorf("Open(%q): URL %q, reason %q; want %q, %q", r.url, ue.URL, ue.Reason, r.shown, r.reason)
		}
		want := `storeurl: bad store URL "` + r.shown + `": ` + r.reason
		if err.Error() != want {
			t.Errorf("Open(%q) = %q, want %q", r.url, err, want)
		}
		if !errors.Is(err, storeurl.ErrBadURL) || (r.pkgErr != nil && !errors.Is(err, r.pkgErr)) {
			t.Errorf("Open(%q) = %v: errors.Is ErrBadURL %v, %v %v", r.url, err, errors.Is(err, storeurl.ErrBadURL), r.pkgErr, errors.Is(err, r.pkgErr))
		}
	}
}

func TestUnreachable(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:1", "memcached://127.0.0.1:1", "memcacheds://127.0.0.1:1"} {
		st, err := storeurl.Open(u, storeurl.WithTimeout(200*time.Millisecond))
		if err == nil {
			st.Close()
			t.Fatalf("Open(%q) succeeded with nothing listening", u)
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("Open(%q) = %v, want store.ErrUnavailable", u, err)
		}
		// A nil *memcached.Store in a non-nil store.Store would pass
		// the usual "if st != nil { st.Close() }" and panic there.
		if st != nil {
			t.Errorf("Open(%q) returned the non-nil store %#v with its error", u, st)
		}
	}
}

func TestOpenEveryStore(t *testing.T) {
	urls := map[string]func(t *testing.T) string{
		"memory":    func(*testing.T) string { return "memory://?max_keys=1000" },
		"redis":     func(t *testing.T) string { return "redis://" + testserver.Redis(t) },
		"cluster":   func(t *testing.T) string { return "redis-cluster://" + strings.Join(testserver.RedisCluster(t), ",") },
		"memcached": func(t *testing.T) string { return "memcached://" + testserver.Memcached(t) },
		"sentinel": func(t *testing.T) string {
			m, s := testserver.RedisSentinel(t)
			return "redis-sentinel://" + m + "@" + strings.Join(s, ",")
		},
	}
	l, _ := algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 2, Period: time.Hour})
	for name, mk := range urls {
		t.Run(name, func(t *testing.T) {
			u := mk(t)
			st, err := storeurl.Open(u)
			if err != nil {
				t.Fatalf("Open(%q): %v", u, err)
			}
			defer st.Close()
			key := "storeurl-" + name + "-" + time.Now().Format("150405.000000")
			out := make([]algo.Decision, 1)
			var admitted int
			for range 3 {
				res, err := st.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
			}
			if admitted != 2 {
				t.Fatalf("%s admitted %d of 3 at a limit of 2", u, admitted)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:1/0":                 "redis://u:xxxxx@h:1/0",
		"redis-sentinel://u:pw@mymaster@h:1": "redis-sentinel://u:xxxxx@mymaster@h:1",
		"redis://h:1":                        "redis://h:1",
		"redis-sentinel://mymaster@h:1,h:2":  "redis-sentinel://mymaster@h:1,h:2",
		"memcached://bob:pw@h:1":             "memcached://xxxxx@h:1",
		"memcacheds://bob:pw@h:1,h:2":        "memcacheds://xxxxx@h:1,h:2",
		"MemcacheDS://pw@h:1":                "MemcacheDS://xxxxx@h:1",
		"memcacheds://h:1":                   "memcacheds://h:1",
	} {
		if got := storeurl.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMemoryDefaultCap: memory:// holds at most DefaultMaxKeys keys unless
// its URL says otherwise, and max_keys=0 removes the cap. Before, a server
// on the default store kept every key a client's new descriptor values
// made (the example configuration's monthly quota: 100 000 keys for 8.7 MB
// of requests, kept a month).
func TestMemoryDefaultCap(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want int64
	}{
		{"memory://", storeurl.DefaultMaxKeys},
		{"memory://?shards=4", storeurl.DefaultMaxKeys},
		{"memory://?max_keys=0", 0},
		{"memory://?max_keys=5000", 5000},
	} {
		st, err := storeurl.Open(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if got := st.(*memory.Store).Stats().MaxKeys; got != tc.want {
			t.Errorf("%s: MaxKeys %d, want %d", tc.url, got, tc.want)
		}
		_ = st.Close()
	}
	st, err := storeurl.Open("memory://", storeurl.WithMemoryOptions(memory.WithMaxKeys(7)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.(*memory.Store).Stats().MaxKeys; got != 7 {
		t.Errorf("WithMemoryOptions(WithMaxKeys(7)): MaxKeys %d, want 7", got)
	}
}
