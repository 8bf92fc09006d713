package redis

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want Endpoint
	}{
		{"redis://127.0.0.1:6379", Endpoint{Mode: Standalone, Addrs: []string{"127.0.0.1:6379"}}},
		{"redis://localhost", Endpoint{Mode: Standalone, Addrs: []string{"localhost:6379"}}},
		{"redis://[::1]", Endpoint{Mode: Standalone, Addrs: []string{"[::1]:6379"}}},
		{"redis://[::1]:7000/2", Endpoint{Mode: Standalone, Addrs: []string{"[::1]:7000"}, DB: 2}},
		{"redis://:secret@h:1/3", Endpoint{Mode: Standalone, Addrs: []string{"h:1"}, Password: "secret", DB: 3}},
		{"redis://bob:p%40ss@h:1", Endpoint{Mode: Standalone, Addrs: []string{"h:1"}, Username: "bob", Password: "p@ss"}},
		{"rediss://h:6380", Endpoint{Mode: Standalone, Addrs: []string{"h:6380"}, TLS: true}},
		{"REDIS://h:1", Endpoint{Mode: Standalone, Addrs: []string{"h:1"}}},
		{"redis-sentinel://mymaster@a:26379,b:26380", Endpoint{Mode: Sentinel, Addrs: []string{"a:26379", "b:26380"}, MasterSet: "mymaster"}},
		{"redis-sentinel://u:p@mymaster@a:1/4", Endpoint{Mode: Sentinel, Addrs: []string{"a:1"}, MasterSet: "mymaster", Username: "u", Password: "p", DB: 4}},
		{"redis-cluster://a:7000,b:7001,c:7002", Endpoint{Mode: Cluster, Addrs: []string{"a:7000", "b:7001", "c:7002"}}},
		{"redis-cluster://:pw@a:7000", Endpoint{Mode: Cluster, Addrs: []string{"a:7000"}, Password: "pw"}},
		{"redis://h:1/2?wait_replicas=1", Endpoint{Mode: Standalone, Addrs: []string{"h:1"}, DB: 2, WaitReplicas: 1, WaitTimeout: DefaultWaitTimeout}},
		{"rediss://:p?w@h:1?wait_replicas=2&wait_timeout=1.5s", Endpoint{Mode: Standalone, Addrs: []string{"h:1"}, Password: "p?w", TLS: true, WaitReplicas: 2, WaitTimeout: 1500 * time.Millisecond}},
		{"redis://h:1?wait_replicas=0", Endpoint{Mode: Standalone, Addrs: []string{"h:1"}}},
		{"redis-sentinel://m@a:1,b:2?wait_timeout=20ms&wait_replicas=1", Endpoint{Mode: Sentinel, Addrs: []string{"a:1", "b:2"}, MasterSet: "m", WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond}},
		{"redis-cluster://a:7000?wait_replicas=1", Endpoint{Mode: Cluster, Addrs: []string{"a:7000"}, WaitReplicas: 1, WaitTimeout: DefaultWaitTimeout}},
	} {
		got, err := ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if got.Mode != tc.want.Mode || !slices.Equal(got.Addrs, tc.want.Addrs) || got.MasterSet != tc.want.MasterSet ||
			got.Username != tc.want.Username || got.Password != tc.want.Password || got.DB != tc.want.DB || got.TLS != tc.want.TLS ||
			got.WaitReplicas != tc.want.WaitReplicas || got.WaitTimeout != tc.want.WaitTimeout {
			t.Errorf("ParseURL(%q) = %+v, want %+v", tc.url, got, tc.want)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, tc := range []struct {
		url, want string // want: a part of the message
	}{
		{"", "missing scheme"},
		{"127.0.0.1:6379", "missing scheme"},
		{"memcached://h:1", `unknown scheme "memcached"`},
		{"redis://", "missing host"},
		{"redis://h:0", "port must be 1-65535"},
		{"redis://h:70000", "port must be 1-65535"},
		{"redis://h:x", "port must be 1-65535"},
		{"redis://:6379", "empty host"},
		{"redis://a:1,b:2", "takes one host"},
		{"redis://h:1/x", "database must be a non-negative integer"},
		{"redis://h:1/-1", "database must be a non-negative integer"},
		{"redis://h:1?db=2", `unknown parameter "db" (want wait_replicas or wait_timeout)`},
		{"redis://h:1/0#frag", "fragments"},
		{"redis://h:1?wait_replicas=two", `parameter wait_replicas="two": want an integer from 0 to 100`},
		{"redis://h:1?wait_replicas=-1", `parameter wait_replicas="-1"`},
		{"redis://h:1?wait_replicas=101", `parameter wait_replicas="101"`},
		{"redis://h:1?wait_replicas=", `parameter wait_replicas=""`},
		{"redis://h:1?wait_replicas=1&wait_replicas=2", `parameter "wait_replicas" given 2 times`},
		{"redis://h:1?wait_replicas=1&wait_timeout=50", `parameter wait_timeout="50": want a duration from 1ms to 10s`},
		{"redis://h:1?wait_replicas=1&wait_timeout=0s", `parameter wait_timeout="0s"`},
		{"redis://h:1?wait_replicas=1&wait_timeout=500us", `parameter wait_timeout="500us"`},
		{"redis://h:1?wait_replicas=1&wait_timeout=11s", `parameter wait_timeout="11s"`},
		{"redis://h:1?wait_timeout=50ms", "parameter wait_timeout needs wait_replicas"},
		{"redis-cluster://a:1?wait_replicas=1;x", "query: malformed"},
		{"redis-cluster://a:1/0", "no database number"},
		{"redis-cluster://a:1,,b:2", "address 2 is empty"},
		{"redis-cluster://a", "want host:port"},
		{"redis-sentinel://a:1,b:2", "missing master name"},
		{"redis-sentinel://@a:1", "empty master name"},
		{"redis://u:p%zz@h:1", "password is not properly escaped"},
	} {
		_, err := ParseURL(tc.url)
		if err == nil {
			t.Errorf("ParseURL(%q): no error, want one saying %q", tc.url, tc.want)
			continue
		}
		if !errors.Is(err, ErrBadURL) {
			t.Errorf("ParseURL(%q): %v does not wrap ErrBadURL", tc.url, err)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseURL(%q) = %v, want it to say %q", tc.url, err, tc.want)
		}
	}
}

func TestURLErrorsHidePasswords(t *testing.T) {
	for _, u := range []string{
		"redis://bob:hunter2@h:x",
		"redis-sentinel://bob:hunter2@master@h:x",
		"redis-cluster://:hunter2@h",
		"redis://h:1?password=hunter2",
		"redis://h:1?wait_replicas=1&auth=hunter2",
		"redis://h:1?wait_replicas=1&hunter2",
		"redis://:hunter2@h:1?wait_replicas=x",
	} {
		_, err := ParseURL(u)
		if err == nil {
			t.Fatalf("ParseURL(%q): no error", u)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q) = %v: the password shows", u, err)
		}
	}
}

func TestOpenBadInput(t *testing.T) {
	if _, err := Open("redis://h:0"); !errors.Is(err, ErrBadURL) {
		t.Errorf("Open(bad URL) = %v, want ErrBadURL", err)
	}
	for _, opt := range []Option{WithBatchSize(0), WithBatchWindow(-1), WithInflightBatches(0), WithTimeout(0), WithTLSConfig(nil), WithClientOption(nil), WithTestClock(nil),
		WithWait(-1, time.Second), WithWait(1, 0), WithWait(1, time.Minute)} {
		if _, err := Open("redis://127.0.0.1:1", opt); err == nil || errors.Is(err, ErrBadURL) {
			t.Errorf("Open with a bad option: %v, want an option error", err)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil): no error")
	}
	// WAIT's timeout must leave the round trip time to answer.
	for _, c := range []struct {
		url  string
		opts []Option
	}{
		{"redis://127.0.0.1:1?wait_replicas=1&wait_timeout=2s", []Option{WithTimeout(time.Second)}},
		{"redis://127.0.0.1:1", []Option{WithTimeout(time.Second), WithWait(1, time.Second)}},
		{"redis://127.0.0.1:1?wait_replicas=1&wait_timeout=950ms", []Option{WithTimeout(time.Second)}}, // Redis may answer 100 ms late
	} {
		_, err := Open(c.url, c.opts...)
		if err == nil || !strings.Contains(err.Error(), "must be shorter than the store's timeout") || !strings.Contains(err.Error(), "wait_timeout") {
			t.Errorf("Open(%s) with a WAIT timeout past the store's: %v, want an error naming wait_timeout", c.url, err)
		}
	}
}

func TestSlot(t *testing.T) {
	// Values from Redis' CLUSTER KEYSLOT.
	for key, want := range map[string]int{
		"":                 0,
		"foo":              12182,
		"bar":              5061,
		"{user1000}.a":     3443,
		"{user1000}.b":     3443,
		"foo{}{bar}":       8363,
		"foo{{bar}}zap":    4015,
		"foo{bar}{zap}":    5061,
		"123456789":        12739,
		"{st1/x}:a":        Slot("st1/x"),
		"floodgate:limits": Slot("floodgate:limits"),
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func ExampleParseURL() {
	e, err := ParseURL("redis-sentinel://mymaster@10.0.0.1:26379,10.0.0.2:26379/1")
	if err != nil {
		panic(err)
	}
	fmt.Println(e.Mode, e.MasterSet, e.Addrs, e.DB)
	_, err = ParseURL("redis://cache:6379/zero")
	fmt.Println(err)
	// Output:
	// sentinel mymaster [10.0.0.1:26379 10.0.0.2:26379] 1
	// redis: bad store URL "redis://cache:6379/zero": database must be a non-negative integer in decimal digits (no sign), got "zero"
}

func ExampleSlot() {
	// Keys that share a hash tag share a slot: a Take over them is one
	// atomic script call even on a Cluster.
	fmt.Println(Slot("{tenant42}:global") == Slot("{tenant42}:user7"))
	// Output: true
}

// FuzzParseURL checks that no input panics and every error wraps ErrBadURL.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://h:1/2", "rediss://u:p@h", "redis-sentinel://m@a:1,b:2/3",
		"redis-cluster://a:1,b:2", "redis://[::1]", "redis://%zz@h:1", "redis-sentinel://@@@",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e, err := ParseURL(raw)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("ParseURL(%q): %v does not wrap ErrBadURL", raw, err)
			}
			return
		}
		if len(e.Addrs) == 0 || e.Mode == 0 {
			t.Fatalf("ParseURL(%q) = %+v without an error", raw, e)
		}
	})
}
