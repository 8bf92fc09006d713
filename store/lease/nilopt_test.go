package lease_test

import (
	"testing"

	"github.com/floodgate/floodgate/store/lease"
)

// TestNilOptionIgnored: New ignores a nil Option, as memory.New and
// limiter.New do (an option chosen by a condition, left nil); it panicked.
func TestNilOptionIgnored(t *testing.T) {
	s, err := lease.New(noClose{shared(t, newClock())}, nil, lease.WithSlice(4), nil)
	if err != nil {
		t.Fatalf("New with nil options: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
