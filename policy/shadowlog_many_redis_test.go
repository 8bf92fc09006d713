package policy

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store/redis"
)

// TestShadowStoreErrorLoggedOncePerRuleOfMany: 100 shadow rules whose
// keys the Redis user's ACL does not cover, each failing its count
// (NOPERM) on every request, decided by 8 goroutines at once: within one
// ShadowLogInterval the logger gets one line per rule, not more, however
// many rules there are (the causes remembered were 64, so with more
// rules than that each new one forgot another, which then logged again:
// a line per rule and request).
func TestShadowStoreErrorLoggedOncePerRuleOfMany(t *testing.T) {
	const rules, workers, each = 100, 8, 5
	addr := testserver.Redis(t)
	prefix := "fg:test:" + redisRun + ":" + strconv.FormatInt(redisSeq.Add(1), 10) + ":"
	user := "fgshadowmany-" + redisRun + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 10)
	pass := "Pw-" + redisRun + "-s3cret"
	args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">" + pass, "~" + redis.DefaultProbeKey}, redis.ACLRules...)
	if _, err := testserver.RedisDo(addr, 2*time.Second, args...); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _, _ = testserver.RedisDo(addr, 2*time.Second, "ACL", "DELUSER", user) })
	st, err := redis.Open("redis://" + user + ":" + pass + "@" + addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	var ds [][]Entry
	for i := range rules {
		fmt.Fprintf(&b, "  - key: s%d\n    shadow_mode: true\n    rate_limit: {name: dry%d, unit: hour, requests_per_unit: 100}\n", i, i)
		ds = append(ds, ent("s"+strconv.Itoa(i), "v"))
	}
	rec := new(records)
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	e, err := NewEngine(mustParse(t, b.String()), st, WithKeyPrefix(prefix), WithLogger(slog.New(rec)),
		WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for range workers {
		wg.Go(func() {
			for range each {
				r, err := e.Decide(t.Context(), req("d", ds...))
				if err != nil || r.Code != CodeOK {
					errs <- fmt.Errorf("Decide = %v, %v; want OK", r.Code, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range rec.get() {
		seen[attrOf(l, "rule")]++
	}
	for i := range rules {
		if n := seen["dry"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("rule dry%d: %d lines in one interval over %d requests, want 1", i, n, workers*each)
		}
	}
	if t.Failed() {
		t.Logf("%d lines in all", len(rec.get()))
	}
}
