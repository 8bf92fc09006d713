package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/testserver"
	"github.com/floodgate/floodgate/store"
)

// TestNoPermSplitsTheBatch: a user whose ACL key pattern (~fg:*) covers
// one limiter's keys (fg:…) and not another's (app:…), both on one store,
// with 16 goroutines taking at once, so that takes of both are coalesced
// into one script call, which Redis refuses with NOPERM for the app:
// key. Each caller gets its own verdict: the fg: takes are all decided,
// exactly (a budget of K admits K, the rest refused; none fails), the
// app: takes all fail with ErrPermission naming their own key. Before,
// every caller of such a batch failed with ErrPermission (the good
// limiter failed 2166 of 2400 takes). On a Cluster the two keys share a
// hash slot (one hash tag), so that they meet in one script call.
func TestNoPermSplitsTheBatch(t *testing.T) {
	rules := append([]string{"~fg:*"}, ACLRules...)
	t.Run("standalone", func(t *testing.T) {
		addr := testserver.Redis(t)
		user, pass := aclUser(t, []string{addr}, rules...)
		rid := runKey()
		testNoPermBatch(t, "redis://"+user+":"+pass+"@"+addr, "fg:"+rid+":good", "app:"+rid+":bad")
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := testserver.RedisCluster(t)
		user, pass := aclUser(t, nodes, rules...)
		rid := runKey()
		testNoPermBatch(t, "redis-cluster://"+user+":"+pass+"@"+strings.Join(nodes, ","), "fg:{"+rid+"}:good", "app:{"+rid+"}:bad")
	})
}

func testNoPermBatch(t *testing.T, url, good, bad string) {
	const (
		budget     = 100 // the good key's: admitted exactly
		goroutines = 16  // half on each key
		takes      = 50  // per goroutine
	)
	// A day's period: no unit comes back while the test runs.
	goodLimit, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: budget, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	badLimit, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 5, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A generous timeout: a caller that leaves its batch at its deadline
	// may have been charged, and the count would not be exact.
	s := openT(t, url, WithTimeout(20*time.Second), WithBatchWindow(2*time.Millisecond))

	var (
		mu                       sync.Mutex
		admitted, refused, fails int
		badErrs                  []error
		goodErrs                 []error
	)
	var wg sync.WaitGroup
	for g := range goroutines {
		key, l := good, goodLimit
		if g%2 == 1 {
			key, l = bad, badLimit
		}
		wg.Go(func() {
			out := make([]algo.Decision, 1)
			for range takes {
				res, err := s.Take(context.Background(), []store.Request{{Key: key, Limit: l, Cost: 1}}, out)
				mu.Lock()
				switch {
				case key == bad:
					badErrs = append(badErrs, err)
				case err != nil:
					fails++
					if len(goodErrs) < 3 {
						goodErrs = append(goodErrs, err)
					}
				case res.Allowed:
					admitted++
				default:
					refused++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	goodTakes := goroutines / 2 * takes
	if fails > 0 || admitted != budget || refused != goodTakes-budget {
		t.Errorf("takes on %s (allowed by the ACL): %d admitted, %d refused, %d failed (%v); want %d admitted, %d refused, none failed",
			good, admitted, refused, fails, goodErrs, budget, goodTakes-budget)
	}
	if len(badErrs) != goroutines/2*takes {
		t.Fatalf("%d takes on %s, want %d", len(badErrs), bad, goroutines/2*takes)
	}
	wrong := 0
	for _, err := range badErrs {
		if err == nil || !errors.Is(err, ErrPermission) || errors.Is(err, store.ErrUnavailable) ||
			!strings.Contains(err.Error(), fmt.Sprintf("take %q", bad)) || !strings.Contains(err.Error(), "allow ~app:*") {
			if wrong++; wrong <= 3 {
				t.Errorf("take on %s (outside the ACL's key patterns): %v; want ErrPermission naming the key and advising ~app:*", bad, err)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d takes on %s were not refused by the ACL", wrong, len(badErrs), bad)
	}
}

// TestKeysRefused holds which error replies split a coalesced script call
// (see splits): the ACL's refusal of a declared key, raised before the
// script runs; not one raised inside a script, after it may have written,
// nor a refused command, which refuses every call alike.
func TestKeysRefused(t *testing.T) {
	addr := testserver.Redis(t)
	s := openT(t, "redis://"+addr)
	for msg, want := range map[string]bool{
		"NOPERM this user has no permissions to access one of the keys used as arguments":                                                            true,
		"NOPERM User u has no permissions to access the 'app:x' key":                                                                                 true,
		"NOPERM User u has no permissions to access the 'app:script:1' key":                                                                          true,
		"NOPERM User key has no permissions to run the 'evalsha' command":                                                                            false,
		"NOPERM User u has no permissions to run the 'evalsha' command":                                                                              false,
		"NOPERM User u has no permissions to access the 'app:x' key script: abc, on @user_script:12.":                                                false,
		"ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: abc, on @user_script:1.": false,
		"TRYAGAIN Multiple keys request during rehashing of slot":                                                                                    false,
	} {
		// A real server's error reply of that text.
		err := s.client.Do(context.Background(), s.client.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build()).Error()
		if err == nil || !strings.HasSuffix(msg, err.Error()) { // the client drops an "ERR " prefix
			t.Fatalf("EVAL redis.error_reply(%q) = %v", msg, err)
		}
		if got := keysRefused(err); got != want {
			t.Errorf("keysRefused(%q) = %v, want %v", msg, got, want)
		}
	}
	if keysRefused(errors.New("NOPERM this user has no permissions to access one of the keys used as arguments")) {
		t.Error("keysRefused of an error that is not a server's reply = true, want false")
	}
}

// TestBadScriptReplyIsUnavailable: a script reply that is not the
// script's (a value of another type, too few values) is a sign of a
// broken connection or proxy: an outage (store.ErrUnavailable), which a
// failure policy answers, with the message saying what was wrong. The
// replies are a real server's, to scripts returning such values, decoded
// as lua/take.lua's.
func TestBadScriptReplyIsUnavailable(t *testing.T) {
	addr := testserver.Redis(t)
	s := openT(t, "redis://"+addr)
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	q := &store.Request{Key: "fg:" + runKey(), Limit: l, Cost: 1}
	for script, says := range map[string]string{
		"return {1, 'garbage', 0, 0, 0, 0}": "redis: bad script reply",
		"return {1, 1}":                     "redis: script reply too short",
	} {
		r := s.client.Do(context.Background(), s.client.B().Eval().Script(script).Numkeys(0).Build())
		var d algo.Decision
		_, err := decodeLone(r, q, &d)
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), says) {
			t.Errorf("decoding the reply of %q: %v; want %q wrapping store.ErrUnavailable", script, err, says)
		}
	}
}
