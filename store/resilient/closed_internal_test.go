package resilient

import (
	"errors"
	"testing"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memory"
)

// TestNoLocalStoreAfterClose: a FailLocal call that falls back as Close
// runs must not make a local store then, which nothing would close (its
// sweeper goroutine would outlive the Store).
func TestNoLocalStoreAfterClose(t *testing.T) {
	inner, err := memory.New(memory.WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(inner, WithPolicy(FailLocal))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := s.localStore(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("localStore after Close = %T, %v; want store.ErrClosed", st, err)
	}
	if s.localIfAny() != nil {
		t.Fatal("a local store was made after Close")
	}
}
