package server

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestStoreLogInspectNamesNoKey: an Inspect of a Redis key whose value is
// not a Floodgate state (another program's string, a foreign sorted set)
// fails with an error that names the key, for the admin API's caller; the
// store log reports it ("not a floodgate state") without the key, which
// holds a client's address.
func TestStoreLogInspectNamesNoKey(t *testing.T) {
	addr := testserver.Redis(t)
	st, err := redis.Open("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	s, err := resilient.New(st, resilient.WithTimeout(5*time.Second), resilient.WithHooks(l.Hooks(resilient.Hooks{})))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := time.Now().UnixNano()
	str := fmt.Sprintf("api#fixed_window:1000000~client_ip_203.0.113.7~%d", run)
	zset := fmt.Sprintf("api#concurrency:5~client_ip_198.51.100.9~%d", run)
	c := st.Client()
	for _, cmd := range []func() error{
		func() error {
			return c.Do(t.Context(), c.B().Set().Key(str).Value("abc").Px(time.Minute).Build()).Error()
		},
		func() error {
			return c.Do(t.Context(), c.B().Zadd().Key(zset).ScoreMember().ScoreMember(1, "x").Build()).Error()
		},
		func() error { return c.Do(t.Context(), c.B().Pexpire().Key(zset).Milliseconds(60_000).Build()).Error() },
	} {
		if err := cmd(); err != nil {
			t.Fatal(err)
		}
	}
	hours := 0
	l.now = func() time.Time { // an hour between the two lines: not rate-limited
		hours++
		return time.Now().Add(time.Duration(hours) * time.Hour)
	}
	for _, k := range []string{str, zset} {
		_, _, err := s.Inspect(t.Context(), k)
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Fatalf("Inspect(%s): %v, want an error naming the key", k, err)
		}
	}
	log := buf.String()
	t.Log(log)
	if strings.Count(log, "not a floodgate state") != 2 {
		t.Errorf("the store log has %d lines about a value that is no state, want 2", strings.Count(log, "not a floodgate state"))
	}
	for _, part := range []string{"203.0.113.7", "198.51.100.9", "client_ip"} {
		if strings.Contains(log, part) {
			t.Errorf("the store log names a key (%q)", part)
		}
	}
}

// TestStoreLogLeafNamesNoKey: a store's own error that wraps no cause
// and quotes the key (the review's reproduction) is logged with the
// quoted parts blanked.
func TestStoreLogLeafNamesNoKey(t *testing.T) {
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	h := l.Hooks(resilient.Hooks{})
	key := "api#fixed_window:1000000~client_ip_203.0.113.7"
	h.Call("inspect", 0, fmt.Errorf("redis: inspect %q: not a floodgate state (%d bytes)", key, 3))
	if !strings.Contains(buf.String(), "not a floodgate state") || strings.Contains(buf.String(), "203.0.113.7") {
		t.Errorf("store log %q: want the error reported without its key", buf.String())
	}
}
