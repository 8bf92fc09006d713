package memcached_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/storetest"
)

// harness opens stores on the shared server. Memcached supports every
// algorithm (the default Kinds). Its items expire by the server's clock,
// but a state whose ExpiresAt has passed on the injected clock already
// reads as fresh, so the suite's fake-clock expiry test applies.
func harness() storetest.Harness {
	return storetest.Harness{
		New: func(tb testing.TB, clock func() time.Time) store.Store {
			opts := []memcached.Option{memcached.WithTimeout(5 * time.Second)}
			if clock != nil {
				opts = append(opts, memcached.WithClock(clock))
			}
			st, err := memcached.Open("memcached://"+addr, opts...)
			if err != nil {
				tb.Fatal(err)
			}
			return st
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}
