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

// wantRefused fails unless err is a refusal of the deployment, not an
// outage: not store.ErrUnavailable, wrapping kind (when not nil), saying
// each of says.
func wantRefused(t *testing.T, what string, err, kind error, says ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want a refusal", what)
		return
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("%s: %v wraps store.ErrUnavailable; a failure policy would answer for a fault of the deployment", what, err)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Errorf("%s: %v, want it to wrap %v", what, err, kind)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %v does not say %q", what, err, s)
		}
	}
}

// TestNoPermIsNotUnavailable: a user whose ACL key pattern (~fg:*) does
// not cover the keys of the calls (other:…) is refused by Redis with
// NOPERM on every path a call can take — a lone take, the batch script,
// takes coalesced into one batch, a multi-key take, a take over several
// Cluster slots (reserve, then TIME), peek, refund, release, renew, reset
// and inspect — and each error says so (ErrPermission, the pattern to
// allow) instead of wrapping store.ErrUnavailable, for which a failure
// policy failing open admitted every request. Keys the pattern covers
// still work.
func TestNoPermIsNotUnavailable(t *testing.T) {
	rules := append([]string{"~fg:*"}, ACLRules...)
	t.Run("standalone", func(t *testing.T) {
		addr := testserver.Redis(t)
		user, pass := aclUser(t, []string{addr}, rules...)
		testNoPerm(t, "redis://"+user+":"+pass+"@"+addr, pass)
	})
	t.Run("cluster", func(t *testing.T) {
		nodes := testserver.RedisCluster(t)
		user, pass := aclUser(t, nodes, rules...)
		testNoPerm(t, "redis-cluster://"+user+":"+pass+"@"+strings.Join(nodes, ","), pass)
	})
}

func testNoPerm(t *testing.T, url, pass string) {
	rid := runKey()
	ctx := context.Background()
	gcra, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	conc, err := algo.Compile(algo.Params{Algorithm: algo.Concurrency, Limit: 2, LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := openT(t, url, WithTimeout(2*time.Second))
	apart := openT(t, url, WithTimeout(2*time.Second), withoutLoneTake())
	batched := openT(t, url, WithTimeout(2*time.Second), WithBatchWindow(20*time.Millisecond))

	key := "other:" + rid + ":k"
	// Two keys in different Cluster slots, the first's slot not the
	// second's whatever the run id.
	key2 := "other:" + rid + ":k2"
	for i := 0; Slot(key2) == Slot(key) && i < 100; i++ {
		key2 = fmt.Sprintf("other:%s:k2-%d", rid, i)
	}
	one := []store.Request{{Key: key, Limit: gcra, Cost: 1}}
	two := []store.Request{{Key: key, Limit: gcra, Cost: 1}, {Key: key2, Limit: gcra, Cost: 1}}
	lease := []store.Request{{Key: key, Limit: conc, Cost: 1, Lease: 7}}
	out := make([]algo.Decision, 2)
	says := []string{"NOPERM", "the Redis user's ACL does not allow the store's keys: allow ~other:* in its key patterns"}

	_, err = s.Take(ctx, one, out[:1])
	wantRefused(t, "Take (lone script)", err, ErrPermission, says...)
	_, err = apart.Take(ctx, one, out[:1])
	wantRefused(t, "Take (batch script)", err, ErrPermission, says...)
	_, err = s.Take(ctx, two, out)
	wantRefused(t, "Take of two keys", err, ErrPermission, says...)
	wantRefused(t, "Peek", s.Peek(ctx, two, out), ErrPermission, says...)
	wantRefused(t, "Refund", s.Refund(ctx, one), ErrPermission, says...)
	wantRefused(t, "Release", s.Release(ctx, lease), ErrPermission, says...)
	wantRefused(t, "Renew", s.Renew(ctx, lease), ErrPermission, says...)
	wantRefused(t, "Reset", s.Reset(ctx, key, key2), ErrPermission, says...)
	_, _, err = s.Inspect(ctx, key)
	wantRefused(t, "Inspect", err, ErrPermission, says...)

	// Takes coalesced into one batch (the window holds the first for the
	// others) fail alike, each naming its own key.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	bkey := func(i int) string { return fmt.Sprintf("other:%s:b%d", rid, i) }
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = batched.Take(ctx, []store.Request{{Key: bkey(i), Limit: gcra, Cost: 1}}, make([]algo.Decision, 1))
		})
	}
	wg.Wait()
	for i, err := range errs {
		wantRefused(t, fmt.Sprintf("batched Take %d", i), err, ErrPermission, append(says, fmt.Sprintf("take %q", bkey(i)))...)
	}
	for _, err := range append(errs, err) {
		if err != nil && strings.Contains(err.Error(), pass) {
			t.Errorf("the error shows the password: %v", err)
		}
	}

	// The pattern's keys work.
	if res, err := s.Take(ctx, []store.Request{{Key: "fg:" + rid + ":k", Limit: gcra, Cost: 1}}, out[:1]); err != nil || !res.Allowed {
		t.Errorf("Take on a key ~fg:* covers = %+v, %v; want admitted", res, err)
	}
}

// TestWrongPassIsNotUnavailable: once the store's user is given another
// password (or disabled, or deleted) and its connections are closed, the
// reconnection is refused with WRONGPASS: an error of the deployment
// (ErrPermission, saying what to check), not an outage, and without the
// password.
func TestWrongPassIsNotUnavailable(t *testing.T) {
	addr := testserver.Redis(t)
	user, pass := aclUser(t, []string{addr}, append([]string{"~fg:*"}, ACLRules...)...)
	s := openT(t, "redis://"+user+":"+pass+"@"+addr, WithTimeout(2*time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ACL", "SETUSER", user, "resetpass", ">another-" + pass}, {"CLIENT", "KILL", "USER", user}} {
		if _, err := testserver.RedisDo(addr, 2*time.Second, args...); err != nil {
			t.Fatalf("%s: %v", strings.Join(args[:2], " "), err)
		}
	}
	// The first call may meet the killed connection (EOF, an outage);
	// the reconnection is refused from then on.
	for i := range 5 {
		_, err = s.Take(context.Background(), []store.Request{{Key: "fg:" + runKey(), Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		if err != nil && strings.Contains(err.Error(), "WRONGPASS") {
			break
		}
		t.Logf("take %d: %v", i, err)
	}
	wantRefused(t, "Take after the password changed", err, ErrPermission, "WRONGPASS", "the server refused the URL's user and password")
	if err != nil && strings.Contains(err.Error(), pass) {
		t.Errorf("the error shows the password: %v", err)
	}

	// At Open alike.
	err = openErr(t, "redis://"+user+":"+pass+"@"+addr, WithTimeout(2*time.Second))
	wantRefused(t, "Open with the old password", err, ErrPermission, "WRONGPASS", "check the URL's user and password")
	if strings.Contains(err.Error(), pass) {
		t.Errorf("the error shows the password: %v", err)
	}
}

// TestWrongTypeIsNotUnavailable: Redis' WRONGTYPE reply (a key of
// another type, which another program wrote under the store's keys) is
// classified as the deployment's, not an outage. The scripts read a key
// of another type as fresh (TestPeekOnAKeyOfAnotherType), so no call of
// the store meets WRONGTYPE: the reply here is a real server's to a GET
// on a hash, through the one function every call's error goes through.
func TestWrongTypeIsNotUnavailable(t *testing.T) {
	addr := testserver.Redis(t)
	s := openT(t, "redis://"+addr)
	key := "fg:" + runKey() + ":hash"
	if _, err := testserver.RedisDo(addr, 2*time.Second, "HSET", key, "f", "v"); err != nil {
		t.Fatal(err)
	}
	reply := s.client.Do(context.Background(), s.client.B().Get().Key(key).Build()).Error()
	if reply == nil || !strings.HasPrefix(reply.Error(), "WRONGTYPE") {
		t.Fatalf("GET on a hash = %v, want WRONGTYPE", reply)
	}
	wantRefused(t, "WRONGTYPE", callError("take", key, reply), errNotState, "WRONGTYPE", "another program")
}

// TestBusyIsUnavailable: a transient reply stays an outage. A script that
// runs past busy-reply-threshold makes Redis answer BUSY to every other
// call: the take fails with store.ErrUnavailable.
func TestBusyIsUnavailable(t *testing.T) {
	srv := testserver.NewRedis(t, "--busy-reply-threshold", "10")
	if srv == nil {
		t.Skip("no redis-server")
	}
	s := openT(t, "redis://"+srv.Addr, WithTimeout(2*time.Second))
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() {
		// Runs until SCRIPT KILL below.
		_, err := testserver.RedisDo(srv.Addr, 30*time.Second, "EVAL", "local i = 0 while true do i = i + 1 end", "0")
		busy <- err
	}()
	defer func() {
		for range 100 {
			if _, err := testserver.RedisDo(srv.Addr, 2*time.Second, "SCRIPT", "KILL"); err == nil || !strings.Contains(err.Error(), "NOTBUSY") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		<-busy
	}()
	for range 100 {
		_, err = s.Take(context.Background(), []store.Request{{Key: "fg:" + runKey(), Limit: l, Cost: 1}}, make([]algo.Decision, 1))
		if err != nil && strings.Contains(err.Error(), "BUSY") {
			break
		}
		time.Sleep(10 * time.Millisecond) // until the script runs past the threshold
	}
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "BUSY") {
		t.Errorf("Take while a script is busy: %v, want BUSY wrapping store.ErrUnavailable", err)
	}
}

// TestReplyClasses holds each server error code the store can meet to
// its decision (see the table in replyerr.go): the deployment's faults
// are refusals, the transient ones outages.
func TestReplyClasses(t *testing.T) {
	const key = "fg:user:42"
	for _, c := range []struct {
		msg     string
		refused bool
	}{
		{"NOPERM this user has no permissions to access one of the keys used as arguments", true},
		{"NOPERM User u has no permissions to run the 'evalsha' command", true},
		{"ERR Error running script (call to f_x): @user_script:1: @user_script: 1: The user executing the script can't run this command or subcommand", true},
		{"WRONGPASS invalid username-password pair or user is disabled.", true},
		{"NOAUTH Authentication required.", true},
		{"WRONGTYPE Operation against a key holding the wrong kind of value script: abc, on @user_script:12.", true},
		{"CROSSSLOT Keys in request don't hash to the same slot", true},
		{"ERR unknown command 'EVALSHA', with args beginning with: ", true},
		{"OOM command not allowed when used memory > 'maxmemory'.", false},
		{"READONLY You can't write against a read only replica.", false},
		{"LOADING Redis is loading the dataset in memory", false},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", false},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", false},
		{"TRYAGAIN Multiple keys request during rehashing of slot", false},
		{"CLUSTERDOWN The cluster is down", false},
		{"NOREPLICAS Not enough good replicas to write.", false},
		{"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", false},
		{"NOSCRIPT No matching script. Please use EVAL.", false},
		{"ERR max number of clients reached", false},
	} {
		if r := refusalOf(c.msg, key); (r != nil) != c.refused {
			t.Errorf("refusalOf(%q) = %v, want refused %v", c.msg, r, c.refused)
		}
	}
	// No key but its prefix goes into a hint.
	for key, want := range map[string]string{
		"fg:user:42":      "allow ~fg:* in its key patterns",
		"secret-api-key":  "add a key pattern that covers them",
		"a b:c":           "add a key pattern that covers them",
		"tenant*acme:bob": "add a key pattern that covers them",
	} {
		r := refusalOf("NOPERM this user has no permissions to access one of the keys used as arguments", key)
		if r == nil || !strings.Contains(r.hint, want) {
			t.Errorf("refusal hint for key %q = %+v, want it to say %q", key, r, want)
		}
	}
}

// TestWaitNoPermIsNotUnavailable: under WithWait, a WAIT the ACL refuses
// (the user lost +wait after Open checked it) fails the take with an
// *AckError that wraps ErrPermission and says what the user needs, not
// store.ErrUnavailable.
func TestWaitNoPermIsNotUnavailable(t *testing.T) {
	addr := testserver.Redis(t)
	user, pass := aclUser(t, []string{addr}, append([]string{"~fg:*"}, ACLRules...)...)
	s := openT(t, "redis://"+user+":"+pass+"@"+addr, WithWait(1, 50*time.Millisecond))
	if _, err := testserver.RedisDo(addr, 2*time.Second, "ACL", "SETUSER", user, "-wait"); err != nil {
		t.Fatal(err)
	}
	l, err := algo.Compile(algo.Params{Algorithm: algo.GCRA, Limit: 2, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Take(context.Background(), []store.Request{{Key: "fg:" + runKey(), Limit: l, Cost: 1}}, make([]algo.Decision, 1))
	var ae *AckError
	if !errors.As(err, &ae) || ae.Err == nil {
		t.Fatalf("Take without +wait: %v, want an *AckError with WAIT's refusal", err)
	}
	wantRefused(t, "Take without +wait", err, ErrPermission, "WAIT: NOPERM", "it needs ACL SETUSER <user> on ><password> ~fg:*")
}
