package resilient_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// TestInspectAbandonedAtTheDeadline: an Inspect that the timeout cut
// short on a hung redis-server returns the timeout and the zero state,
// and the store's late answer, when the server resumes, writes nothing
// the caller holds (run with -race: the answer used to be written into
// the variables Inspect had returned).
func TestInspectAbandonedAtTheDeadline(t *testing.T) {
	srv, ss := sharedRedis(t, 1, resilient.WithTimeout(50*time.Millisecond))
	s := ss[0]
	l := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Hour})
	key := "inspect-" + t.Name()
	take(t, s, key, l, 1)
	pause(t, srv)
	st, found, err := s.Inspect(context.Background(), key)
	if !errors.Is(err, store.ErrUnavailable) || found {
		t.Fatalf("Inspect on a hung store = %+v, %v, %v; want store.ErrUnavailable, not found", st, found, err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	// The late answer arrives once the server runs again; wait for it
	// (a real process, not math) and read what Inspect returned.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if _, ok, err := s.Inspect(context.Background(), key); err == nil && ok {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if found {
		t.Fatalf("the value Inspect returned changed: %+v, %v", st, found)
	}
}
