package limiter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/redis"
)

// TestStoreKeyPrefixRedis: on a Redis shared with an application, a
// limiter named user deciding keys 42 and 43 leaves the application's
// user:42 (a JSON string without TTL) and user:43 (a hash) untouched and
// keeps its state under fg:user:42 and fg:user:43; and a Redis user
// restricted to ~fg:*, as docs/STORES.md recommends, may run every call.
// A private server: the test writes keys of no test prefix and adds an
// ACL user, which the shared servers must not see.
func TestStoreKeyPrefixRedis(t *testing.T) {
	srv := testserver.NewRedis(t)
	do := func(t *testing.T, args ...string) any {
		t.Helper()
		v, err := testserver.RedisDo(srv.Addr, 5*time.Second, args...)
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		return v
	}
	const app = `{"id":42,"name":"Ada"}`
	do(t, "SET", "user:42", app)
	do(t, "HSET", "user:43", "name", "Grace")
	do(t, "ACL", "SETUSER", "fgonly", "on", ">fgonly-pw", "~fg:*", "+@all")

	for _, user := range []string{"", "fgonly:fgonly-pw@"} {
		t.Run("user="+strings.TrimSuffix(user, ":fgonly-pw@"), func(t *testing.T) {
			st, err := redis.Open("redis://"+user+srv.Addr, redis.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			ctx := t.Context()
			bucket := newLimiter(t, st, "user", algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second})
			conc := newLimiter(t, st, "user", algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: time.Minute})
			if _, err := bucket.Allow(ctx, "42"); err != nil {
				t.Fatalf("Allow: %v", err)
			}
			if _, err := bucket.AllowN(ctx, "42", 2); err != nil {
				t.Fatalf("AllowN: %v", err)
			}
			r, err := bucket.Reserve(ctx, "42", 1)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			if err := r.Cancel(ctx); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			if err := bucket.Wait(ctx, "42", 1); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if _, err := bucket.Peek(ctx, "42", 1); err != nil {
				t.Fatalf("Peek: %v", err)
			}
			if _, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: bucket, Key: "42"}, {Limiter: conc, Key: "43"}}); err != nil {
				t.Fatalf("AllowAll: %v", err)
			}
			lease, err := conc.Acquire(ctx, "43")
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}

			if got := do(t, "GET", "user:42"); got != app {
				t.Errorf("the application's user:42 = %#v, want %q", got, app)
			}
			if got := do(t, "TTL", "user:42"); got != int64(-1) {
				t.Errorf("TTL user:42 = %v, want -1 (none)", got)
			}
			if got := do(t, "HGET", "user:43", "name"); got != "Grace" {
				t.Errorf("the application's hash user:43 name = %#v, want Grace", got)
			}
			if got := do(t, "TYPE", "fg:user:42"); got != "string" {
				t.Errorf("TYPE fg:user:42 = %v, want the bucket's string", got)
			}
			if got := do(t, "TYPE", "fg:user:43"); got != "zset" {
				t.Errorf("TYPE fg:user:43 = %v, want the concurrency limit's sorted set", got)
			}
			if err := bucket.Reset(ctx, "42"); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			if got := do(t, "EXISTS", "fg:user:42"); got != int64(0) {
				t.Errorf("after Reset, EXISTS fg:user:42 = %v, want 0", got)
			}
			if got := do(t, "GET", "user:42"); got != app {
				t.Errorf("after Reset, user:42 = %#v, want %q", got, app)
			}
			do(t, "DEL", "fg:user:43")
		})
	}

	// Without the prefix the same user may not touch the keys: the keys of
	// before, which WithKeyPrefix("") keeps, need another ACL.
	st, err := redis.Open("redis://fgonly:fgonly-pw@"+srv.Addr, redis.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	old := newLimiter(t, st, "user", algo.Params{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second}, limiter.WithKeyPrefix(""))
	if _, err := old.Allow(t.Context(), "44"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("WithKeyPrefix(\"\") under ~fg:*: Allow = %v, want a NOPERM error", err)
	}
}
