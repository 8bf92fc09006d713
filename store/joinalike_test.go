package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate/floodgate/store"
)

// TestJoinAlike: errors that differ only in their quoted keys are told
// once with a count, each kind stays findable by errors.Is, and one error
// comes back as itself.
func TestJoinAlike(t *testing.T) {
	if store.JoinAlike(nil, "key") != nil {
		t.Error("no errors: not nil")
	}
	one := fmt.Errorf("take %q: %w", "k1", store.ErrUnavailable)
	if got := store.JoinAlike([]error{one}, "key"); got != one {
		t.Errorf("one error: %v, want it as it is", got)
	}
	down := func(k string) error { return fmt.Errorf("take %q: %w: connection refused", k, store.ErrUnavailable) }
	refused := errors.New(`take "k9": NOPERM`)
	for _, tc := range []struct {
		errs []error
		noun string
		want string
	}{
		{[]error{down("a"), down("b"), down("c")}, "key", `take "a": store: unavailable: connection refused (and 2 more keys alike)`},
		{[]error{down("a"), down("b")}, "key", `take "a": store: unavailable: connection refused (and 1 more key alike)`},
		{[]error{down("a"), refused, down("b")}, "", "take \"a\": store: unavailable: connection refused (and 1 more alike)\ntake \"k9\": NOPERM"},
	} {
		got := store.JoinAlike(tc.errs, tc.noun)
		if got.Error() != tc.want {
			t.Errorf("JoinAlike: %q, want %q", got, tc.want)
		}
		if !errors.Is(got, store.ErrUnavailable) {
			t.Errorf("%q: not ErrUnavailable", got)
		}
	}
}
