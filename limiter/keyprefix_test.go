package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// memOf returns the memory store behind st, seen as itself or through
// opaque.
func memOf(t *testing.T, st store.Store) *memory.Store {
	t.Helper()
	if o, ok := st.(opaque); ok {
		st = o.Store
	}
	m, ok := st.(*memory.Store)
	if !ok {
		t.Fatalf("%T is not a memory store", st)
	}
	return m
}

// held reports whether the store holds state under key.
func held(t *testing.T, st store.Store, key string) bool {
	t.Helper()
	_, ok, err := memOf(t, st).Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestStoreKeyPrefix holds every path that writes or reads a key, on the
// memory store's own path and on the generic one, to the store key
// "fg:" + name + ":" + key: a limiter named user deciding key 42 keeps its
// state under fg:user:42, never under user:42, an application's key.
func TestStoreKeyPrefix(t *testing.T) {
	bucket := algo.Params{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Second}
	conc := algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute}
	verbs := []struct {
		name string
		p    algo.Params
		do   func(ctx context.Context, l *limiter.Limiter, key string) error
	}{
		{"Allow", bucket, func(ctx context.Context, l *limiter.Limiter, key string) error {
			_, err := l.Allow(ctx, key)
			return err
		}},
		{"AllowN", bucket, func(ctx context.Context, l *limiter.Limiter, key string) error {
			_, err := l.AllowN(ctx, key, 2)
			return err
		}},
		{"Reserve", bucket, func(ctx context.Context, l *limiter.Limiter, key string) error {
			_, err := l.Reserve(ctx, key, 1)
			return err
		}},
		{"Wait", bucket, func(ctx context.Context, l *limiter.Limiter, key string) error {
			return l.Wait(ctx, key, 1)
		}},
		{"AllowAll", bucket, func(ctx context.Context, l *limiter.Limiter, key string) error {
			_, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: l, Key: key}})
			return err
		}},
		{"Acquire", conc, func(ctx context.Context, l *limiter.Limiter, key string) error {
			_, err := l.Acquire(ctx, key)
			return err
		}},
		{"ReserveConcurrency", conc, func(ctx context.Context, l *limiter.Limiter, key string) error {
			_, err := l.Reserve(ctx, key, 1)
			return err
		}},
	}
	both(t, func(t *testing.T, st store.Store, _ *storetest.Clock) {
		ctx := t.Context()
		for _, v := range verbs {
			l := newLimiter(t, st, "user", v.p)
			if got := l.StoreKey("42"); got != "fg:user:42" {
				t.Fatalf("StoreKey(42) = %q, want fg:user:42", got)
			}
			if err := l.Reset(ctx, "42"); err != nil {
				t.Fatal(err)
			}
			if err := v.do(ctx, l, "42"); err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			if !held(t, st, "fg:user:42") {
				t.Errorf("%s: no state under fg:user:42", v.name)
			}
			if held(t, st, "user:42") {
				t.Errorf("%s wrote user:42, the key without the prefix", v.name)
			}
			if d, err := l.Peek(ctx, "42", 0); err != nil || d.Remaining == d.Limit {
				t.Errorf("%s: Peek = %+v, %v; want it to read the units taken under fg:user:42", v.name, d, err)
			}
			if err := l.Reset(ctx, "42"); err != nil || held(t, st, "fg:user:42") {
				t.Errorf("%s: Reset(42) = %v and fg:user:42 held: %v; want it removed", v.name, err, held(t, st, "fg:user:42"))
			}
		}
	})
}

// TestWithKeyPrefix: the option sets the prefix; "" gives the keys of
// before the prefix, name + separator + key.
func TestWithKeyPrefix(t *testing.T) {
	if limiter.DefaultKeyPrefix != "fg:" {
		t.Errorf("DefaultKeyPrefix = %q, want fg:", limiter.DefaultKeyPrefix)
	}
	for _, c := range []struct {
		opts []limiter.Option
		want string
	}{
		{nil, "fg:user:42"},
		{[]limiter.Option{limiter.WithKeyPrefix("")}, "user:42"},
		{[]limiter.Option{limiter.WithKeyPrefix("app1/")}, "app1/user:42"},
		{[]limiter.Option{limiter.WithKeyPrefix("app1/"), limiter.WithSeparator("|")}, "app1/user|42"},
	} {
		both(t, func(t *testing.T, st store.Store, _ *storetest.Clock) {
			l := newLimiter(t, st, "user", algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute}, c.opts...)
			if got := l.StoreKey("42"); got != c.want {
				t.Errorf("StoreKey(42) = %q, want %q", got, c.want)
			}
			if _, err := l.Allow(t.Context(), "42"); err != nil {
				t.Fatal(err)
			}
			if !held(t, st, c.want) {
				t.Errorf("Allow(42) left no state under %q", c.want)
			}
		})
	}
}
