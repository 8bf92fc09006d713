package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate/floodgate/store"
)

func TestFailureHidesTheMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("redis 10.0.0.7:6379: %w", context.DeadlineExceeded), "the store did not answer in time"},
		{fmt.Errorf("memcached: %w after 8 tries", store.ErrContention), "too much contention on the key; retry"},
		{fmt.Errorf("dial tcp 10.0.0.7:6379: %w", store.ErrUnavailable), "the store is unavailable"},
		{fmt.Errorf("memory: %w", store.ErrClosed), "the store is unavailable"},
		{fmt.Errorf("take: %w", context.Canceled), "the request was cancelled"},
		{errors.New("ERR wrong number of arguments at 10.0.0.7"), "the store failed"},
	} {
		if got := store.Failure(c.err); got != c.want {
			t.Errorf("Failure(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}
