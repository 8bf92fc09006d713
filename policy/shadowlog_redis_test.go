package policy

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
)

// records is a slog.Handler that keeps every record.
type records struct {
	mu  sync.Mutex
	all []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) get() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]slog.Record(nil), r.all...)
}

func attrOf(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// TestShadowStoreErrorLogged: a shadow rule whose keys the Redis user's
// ACL does not cover (NOPERM, no outage) fails its count on every
// request, which is decided without it (OK, its status undecided); the
// Engine's logger gets one WARN line for it per ShadowLogInterval, naming
// the rule and the store's error without the key (a descriptor value),
// the next line saying how many were left out. Before, nothing but the
// server's store log said so.
func TestShadowStoreErrorLogged(t *testing.T) {
	addr := testserver.Redis(t)
	prefix := "fg:test:" + redisRun + ":" + strconv.FormatInt(redisSeq.Add(1), 10) + ":"
	user := "fgshadow-" + redisRun + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	pass := "Pw-" + redisRun + "-s3cret"
	args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~" + redis.DefaultProbeKey, "~" + prefix + "d|a=*"}, redis.ACLRules...)
	if _, err := testserver.RedisDo(addr, 2*time.Second, args...); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _, _ = testserver.RedisDo(addr, 2*time.Second, "ACL", "DELUSER", user) })
	st, err := redis.Open("redis://" + user + ":" + pass + "@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {name: enforced, unit: hour, requests_per_unit: 100}
  - key: s
    shadow_mode: true
    rate_limit: {name: dry, unit: hour, requests_per_unit: 100}
`)
	rec := new(records)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	e, err := NewEngine(cfg, st, WithKeyPrefix(prefix), WithLogger(slog.New(rec)), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	decide := func() {
		t.Helper()
		r, err := e.Decide(t.Context(), req("d", ent("a", "x"), ent("s", "secret-value")))
		if err != nil || r.Code != CodeOK || len(r.Statuses[0].Limits) != 1 || len(r.Statuses[1].Limits) != 0 {
			t.Fatalf("Decide = %+v, %v; want OK, the shadow rule's status undecided", r, err)
		}
	}
	for range 3 {
		decide()
	}
	lines := rec.get()
	if len(lines) != 1 {
		t.Fatalf("%d lines after 3 requests, want 1: %v", len(lines), lines)
	}
	l := lines[0]
	if l.Level != slog.LevelWarn || attrOf(l, "rule") != "dry" || attrOf(l, "domain") != "d" || !strings.Contains(attrOf(l, "err"), "NOPERM") {
		t.Errorf("line %v: want a WARN naming domain d, rule dry and the NOPERM", l)
	}
	if strings.Contains(attrOf(l, "err"), "secret-value") {
		t.Errorf("line's error %q quotes the key (a descriptor value)", attrOf(l, "err"))
	}
	mu.Lock()
	now = now.Add(ShadowLogInterval)
	mu.Unlock()
	decide()
	lines = rec.get()
	if len(lines) != 2 || attrOf(lines[1], "left_out") != "2" {
		t.Fatalf("after the interval: lines %v; want a second line, 2 left out", lines)
	}
}
