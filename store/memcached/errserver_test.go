package memcached_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
)

// TestErrorsNameTheServer: a key's failure names the server that failed
// it, whatever the client's error says: a connection the server closed
// reads as a bare "EOF", which in a ring of several servers told the
// operator nothing of where to look. The proxy drops the connection that
// sends the command.
func TestErrorsNameTheServer(t *testing.T) {
	proxy := testserver.NewCutProxy(t, addr)
	clock := newClock(t0.Add(30 * time.Minute))
	s := openURL(t, "memcached://"+proxy.Addr(), clock, memcached.WithTimeout(time.Second))
	fixed := compile(t, algo.Params{Algorithm: algo.FixedWindow, Limit: 5, Period: time.Hour})
	bucket := compile(t, algo.Params{Algorithm: algo.TokenBucket, Limit: 5, Period: time.Hour})
	conc := compile(t, algo.Params{Algorithm: algo.Concurrency, Limit: 5, LeaseTTL: time.Hour})
	out := make([]algo.Decision, 1)
	key := func(name string) string { return uniqueKey(t, name) }
	tests := []struct {
		name string
		cut  string
		call func() error
	}{
		{"Take of a window", "incr ", func() error {
			_, err := s.Take(ctx(t), []store.Request{{Key: key("w"), Limit: fixed, Cost: 1}}, out)
			return err
		}},
		{"Take of a bucket", "gets ", func() error {
			_, err := s.Take(ctx(t), []store.Request{{Key: key("b"), Limit: bucket, Cost: 1}}, out)
			return err
		}},
		{"Peek of a bucket", "gets ", func() error {
			return s.Peek(ctx(t), []store.Request{{Key: key("p"), Limit: bucket, Cost: 1}}, out)
		}},
		{"Refund of a window", "decr ", func() error {
			return s.Refund(ctx(t), []store.Request{{Key: key("r"), Limit: fixed, Cost: 1}})
		}},
		{"Release", "gets ", func() error {
			return s.Release(ctx(t), []store.Request{{Key: key("l"), Limit: conc, Lease: 3}})
		}},
		{"Reset", "gets ", func() error { return s.Reset(ctx(t), key("x")) }},
	}
	for _, tt := range tests {
		proxy.CutOn(tt.cut)
		err := tt.call()
		proxy.CutOn("")
		switch {
		case err == nil:
			t.Errorf("%s: no error with the connection dropped on %q", tt.name, tt.cut)
		case !errors.Is(err, store.ErrUnavailable):
			t.Errorf("%s: %v does not wrap store.ErrUnavailable", tt.name, err)
		case !strings.Contains(err.Error(), proxy.Addr()):
			t.Errorf("%s: %q does not name the server %s", tt.name, err, proxy.Addr())
		case strings.Count(err.Error(), proxy.Addr()) > 1:
			t.Errorf("%s: %q names the server twice", tt.name, err)
		}
	}
}
