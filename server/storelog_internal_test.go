package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// storeErr is an error as the Redis store wraps a server's reply.
func storeErr(key, reply string) error {
	return fmt.Errorf("redis: take %q: %w: %w", key, store.ErrUnavailable, errors.New(reply))
}

// TestStoreLogRateLimit steps a StoreLog's clock: one line per cause per
// StoreLogInterval whatever the key, the next saying how many were left
// out; a re-opening of the breaker only when its cause changed; URLs
// redacted; at most maxCauses causes remembered.
func TestStoreLogRateLimit(t *testing.T) {
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	h := l.Hooks(resilient.Hooks{})
	count := func(sub string) int { return strings.Count(buf.String(), sub) }

	const readonly = "READONLY You can't write against a read only replica."
	for i := range 10 {
		h.Call("take", time.Millisecond, storeErr(fmt.Sprintf("fg:k%d", i), readonly))
	}
	if n := count(readonly); n != 1 {
		t.Fatalf("t0: %d lines for 10 errors of one cause, want 1:\n%s", n, buf.String())
	}
	h.Call("take", time.Millisecond, storeErr("fg:k", "WRONGTYPE Operation against a key holding the wrong kind of value"))
	if n := count("WRONGTYPE"); n != 1 {
		t.Fatalf("another cause: %d lines, want 1:\n%s", n, buf.String())
	}
	now = now.Add(StoreLogInterval - time.Second)
	h.Call("take", time.Millisecond, storeErr("fg:k", readonly))
	if n := count(readonly); n != 1 {
		t.Fatalf("t0+59s: %d lines, want still 1:\n%s", n, buf.String())
	}
	now = now.Add(time.Second)
	h.Call("take", time.Millisecond, storeErr("fg:k", readonly))
	if n, m := count(readonly), count("(10 more like it since the last report)"); n != 2 || m != 1 {
		t.Fatalf("t0+60s: %d lines, %d saying 10 were left out; want 2 and 1:\n%s", n, m, buf.String())
	}

	for _, err := range []error{
		fmt.Errorf("redis: take %q: %w: %w", "fg:k", store.ErrUnavailable, fmt.Errorf("dial tcp 127.0.0.1:1: %w", syscall.ECONNREFUSED)),
		fmt.Errorf("resilient: no answer within the timeout: %w", store.ErrUnavailable),
		resilient.ErrCircuitOpen,
	} {
		before := buf.Len()
		h.Call("take", time.Millisecond, err)
		if buf.Len() != before {
			t.Errorf("%v: logged as a store error:\n%s", err, buf.String()[before:])
		}
	}
	// A state the store refuses to keep fails every caller of the rule
	// until the configuration changes: it is logged (once per cause), with
	// the key blanked.
	before := buf.Len()
	for range 3 {
		h.Call("take", time.Millisecond, fmt.Errorf("%w: memcached: take %q: token_bucket state of 600 bytes over the item size limit of 512 bytes", store.ErrBadRequest, "fg:api|user=alice"))
	}
	if got := buf.String()[before:]; strings.Count(got, "over the item size limit") != 1 || strings.Contains(got, "alice") {
		t.Errorf("a state over the item size, 3 times: logged %q, want one line without the key", got)
	}

	// Optimistic concurrency that gave up (memcached's compare-and-swap
	// on a hot key) is answered by the failure policy while the store
	// is up: the operator hears of it once per interval, key blanked.
	before = buf.Len()
	for i := range 50 {
		h.Call("take", time.Millisecond, fmt.Errorf("%w: memcached: key %q: %d compare-and-swap attempts lost to concurrent writers; nothing was charged",
			store.ErrContention, fmt.Sprintf("fg:api|user=alice%d", i), 17))
	}
	if got := buf.String()[before:]; strings.Count(got, "compare-and-swap attempts lost") != 1 || strings.Contains(got, "alice") || !strings.Contains(got, "level=WARN") {
		t.Errorf("50 contention give-ups: logged %q, want one WARN line without the key", got)
	}

	trip := func(reopened bool, reply string) {
		h.Tripped(&resilient.CircuitOpenError{Failures: 5, Last: storeErr("fg:k", reply), Reopened: reopened})
	}
	buf.Reset()
	trip(false, readonly)
	trip(true, readonly)
	trip(false, readonly)
	if n := count("store circuit breaker"); n != 1 {
		t.Fatalf("an opening, a re-opening and an opening with one cause: %d lines, want 1:\n%s", n, buf.String())
	}
	trip(true, "OOM command not allowed when used memory > 'maxmemory'.")
	if n := count("store circuit breaker still open, with another failure"); n != 1 {
		t.Fatalf("a re-opening with another cause: %d lines, want 1:\n%s", n, buf.String())
	}
	now = now.Add(StoreLogInterval)
	trip(true, "OOM command not allowed when used memory > 'maxmemory'.")
	if n := count("OOM"); n != 1 {
		t.Fatalf("a re-opening with the same cause a minute later: %d lines, want 1:\n%s", n, buf.String())
	}
	trip(false, "OOM command not allowed when used memory > 'maxmemory'.")
	if n := count("OOM"); n != 2 || count("store circuit breaker opened") != 2 {
		t.Fatalf("an opening with the same cause a minute later: want it logged:\n%s", buf.String())
	}

	buf.Reset()
	h.Call("take", time.Millisecond, storeErr("fg:k", "ERR connecting to redis://bob:Sup3r-Secr3t@10.0.0.5:6379/0 "+strings.Repeat("x", 400)))
	if out := buf.String(); strings.Contains(out, "Sup3r") || !strings.Contains(out, "redis://bob:xxxxx@10.0.0.5:6379/0") || !strings.Contains(out, "…") {
		t.Errorf("a URL in an error: %s, want it redacted and the text cut", out)
	}

	for i := range 3 * maxCauses {
		h.Call("take", time.Millisecond, storeErr("fg:k", fmt.Sprintf("ERR cause %d", i)))
	}
	if l.errs.Len() > maxCauses {
		t.Errorf("%d causes remembered, want at most %d", l.errs.Len(), maxCauses)
	}
}

// A cause whose text names a slot, an address or a value is one cause:
// Redis answers MOVED with the key's slot, so a resharding logged a line
// per slot (16 384) instead of one.
func TestStoreLogCauseKinds(t *testing.T) {
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	h := l.Hooks(resilient.Hooks{})
	for slot := range 100 {
		h.Call("take", time.Millisecond, storeErr(fmt.Sprintf("fg:k%d", slot), fmt.Sprintf("MOVED %d 10.0.0.%d:6379", slot, slot%3)))
		h.Call("take", time.Millisecond, storeErr("fg:k", fmt.Sprintf("memcached: counter holds %q", fmt.Sprint(slot*7))))
	}
	// Redis names the script that failed by its SHA1 and line: the
	// same missing permission in the take and the ping scripts is one
	// cause, whichever script met it first.
	const denied = "NOPERM The user executing the script can't run this command or subcommand script: %s, on @user_script:%d."
	h.Call("take", time.Millisecond, storeErr("fg:k", fmt.Sprintf(denied, "73119645122a45451c132a229ff0421c561ac0ae", 40)))
	h.Call("ping", time.Millisecond, storeErr("fg:__ping", fmt.Sprintf(denied, "ac977872af9bf237579cec9c5d9b2ef8bd16a753", 310)))
	if n := strings.Count(buf.String(), "can't run this command"); n != 1 {
		t.Errorf("%d lines for one permission missing in two scripts, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "MOVED"); n != 1 {
		t.Errorf("%d lines for MOVED to 100 slots, want 1:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "counter holds"); n != 1 {
		t.Errorf("%d lines for one error with 100 values, want 1:\n%s", n, buf.String())
	}
}

// TestStoreLogPartitions: with a breaker per partition, the openings of
// one dead node's partitions, which share a cause, make one line naming
// the first of them; another node's cause has its own line; re-openings
// are quiet until a partition's cause changes, and the many partitions
// whose cause changes together make one line.
func TestStoreLogPartitions(t *testing.T) {
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	h := l.Hooks(resilient.Hooks{})
	count := func(sub string) int { return strings.Count(buf.String(), sub) }
	trip := func(part int, reopened bool, cause error) {
		h.Tripped(&resilient.CircuitOpenError{Failures: 5, Last: cause, Reopened: reopened,
			Partition: fmt.Sprintf("slots %d-%d", part*256, part*256+255)})
	}
	timeout := fmt.Errorf("resilient: no answer within the timeout: %w", store.ErrUnavailable)
	refused := fmt.Errorf("redis: take: %w: dial tcp 10.0.0.8:6379: %w", store.ErrUnavailable, syscall.ECONNREFUSED)
	for p := 0; p < 21; p++ { // the first master's ranges
		trip(p, false, timeout)
	}
	if n := count("store circuit breaker opened for slots 0-255, the failure policy answers its keys until a probe succeeds: " +
		"resilient: circuit open for slots 0-255 after 5 consecutive failures; last: resilient: no answer within the timeout"); n != 1 || count("level=WARN") != 1 {
		t.Fatalf("21 partitions opening on one cause: want one line naming the first:\n%s", buf.String())
	}
	trip(40, false, refused)
	if n := count("opened for slots 10240-10495"); n != 1 || count("level=WARN") != 2 {
		t.Fatalf("another node's cause: want a line of its own:\n%s", buf.String())
	}
	for p := 0; p < 21; p++ {
		trip(p, true, timeout)
	}
	if count("level=WARN") != 2 {
		t.Fatalf("re-openings with the same cause were logged:\n%s", buf.String())
	}
	for p := 0; p < 21; p++ { // the master was killed: the connection is refused now
		trip(p, true, refused)
	}
	now = now.Add(StoreLogInterval)
	for p := 0; p < 21; p++ {
		trip(p, true, timeout)
	}
	if n := count("store circuit breaker for slots 0-255 still open, with another failure: "); n != 1 || count("level=WARN") != 3 {
		t.Fatalf("21 partitions changing to a cause reported a minute ago: want one line:\n%s", buf.String())
	}
	if n := count("(opened 41 more times with this cause since the last report)"); n != 1 {
		t.Errorf("the line after a minute does not count the 20 openings and 21 re-openings left out:\n%s", buf.String())
	}
}

// TestStoreLogKeyless: the breaker's lines, the store errors' and the
// readiness check's name the store's failure without the key it was about
// (a key holds descriptor values: a client's address, an API key), and
// re-openings whose causes differ only by a key or a number are one cause:
// a stalled store re-opened its breaker every cool-down with a line per
// key.
func TestStoreLogKeyless(t *testing.T) {
	var buf bytes.Buffer
	l := NewStoreLog(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	h := l.Hooks(resilient.Hooks{})
	key := func(i int) string { return fmt.Sprintf("fg:api|remote_address=203.0.113.%d#fixed_window:1000000", i) }
	deadline := func(i int) error {
		return fmt.Errorf("redis: take %q: %w: %w", key(i), store.ErrUnavailable, context.DeadlineExceeded)
	}
	h.Tripped(&resilient.CircuitOpenError{Failures: 5, Last: deadline(1)})
	for i := range 30 { // a re-opening per cool-down, each on another key
		now = now.Add(time.Second)
		h.Tripped(&resilient.CircuitOpenError{Failures: 6 + i, Last: deadline(i + 2), Reopened: true})
	}
	h.Call("take", time.Millisecond, storeErr(key(40), "READONLY You can't write against a read only replica."))
	refused := fmt.Errorf("redis: take %q: %w: %w", key(41), store.ErrUnavailable,
		&net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 8), Port: 6379}, Err: syscall.ECONNREFUSED})
	h.Tripped(&resilient.CircuitOpenError{Failures: 5, Last: refused, Partition: "slots 0-255"})
	out := buf.String()
	if n := strings.Count(out, "store circuit breaker"); n != 2 {
		t.Errorf("%d breaker lines for an opening, 30 re-openings on a timeout and an opening on a refused connection, want 2:\n%s", n, out)
	}
	for _, want := range []string{"last: context deadline exceeded", "store error on take: READONLY You can't write",
		"last: dial tcp 10.0.0.8:6379: connection refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "203.0.113") || strings.Contains(out, "remote_address") {
		t.Errorf("a key in the log:\n%s", out)
	}
	ce := &resilient.CircuitOpenError{Failures: 5, Last: deadline(9)}
	if got := keyless(fmt.Errorf("wrapped: %w", ce)); strings.Contains(got, "203.0.113") || !strings.Contains(got, "circuit open after 5 consecutive failures") {
		t.Errorf("keyless(circuit open) = %q", got)
	}
}
