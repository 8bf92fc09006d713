package memcached_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestTakeErrorTellsACauseOnce: a take over several keys on a server that
// went away fails with the server's error once, not once a key ("connection
// refused; connection refused; …" in every log line and readiness text
// that quotes it), for counters and compare-and-swap states alike; the
// error still says the store is unavailable.
func TestTakeErrorTellsACauseOnce(t *testing.T) {
	srv := testserver.NewMemcached(t)
	if srv == nil {
		t.Skip("no memcached")
	}
	st, err := memcached.Open("memcached://"+srv.Addr, memcached.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []algo.Params{
		{Algorithm: algo.FixedWindow, Limit: 10, Period: time.Minute},
		{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Minute},
	} {
		lim, err := algo.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		reqs := make([]store.Request, 5)
		for i := range reqs {
			reqs[i] = store.Request{Key: fmt.Sprintf("fg:d|k=v%d#%v", i, p.Algorithm), Limit: lim, Cost: 1}
		}
		_, err = st.Take(context.Background(), reqs, make([]algo.Decision, len(reqs)))
		if err == nil {
			t.Fatalf("%v: a take over 5 keys succeeded on a killed memcached", p.Algorithm)
		}
		t.Logf("%v: %v", p.Algorithm, err)
		if n := strings.Count(err.Error(), "connection refused"); n != 1 {
			t.Errorf("%v: the refused connection told %d times, want once: %v", p.Algorithm, n, err)
		}
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%v: %v does not wrap store.ErrUnavailable", p.Algorithm, err)
		}
	}
}
