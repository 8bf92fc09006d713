package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/floodgate/floodgate/internal/causelog"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/resilient"
)

// StoreLogInterval is how often StoreLog repeats a line about the same
// cause: a store error or a breaker opening with a cause it reported less
// than this long ago is counted, not logged.
const StoreLogInterval = time.Minute

// StoreLog reports what a store wrapped by store/resilient does that an
// operator must see and that the failure policy hides, since it keeps
// answering decisions:
//
//   - the breaker opening, with the failure that opened it (READONLY,
//     NOPERM, a refused connection…), at WARN: "store circuit breaker
//     opened, …: …". With a breaker per partition (a Redis Cluster's slot
//     ranges, a memcached ring's servers), the line names the partition
//     ("store circuit breaker opened for slots 5376-5631, …"), and the
//     partitions of one dead node, which open with one cause, make one
//     line: the openings are rate-limited by cause, whichever partition
//     they are of. A re-opening after a failed probe is reported only when
//     the partition's cause changed;
//   - store errors other than timeouts and connection errors (a replica's
//     READONLY, an ACL's NOPERM, a Cluster node's MOVED, OOM, WRONGTYPE,
//     memcached's server errors), at WARN: "store error on take: …".
//     Those are causes the breaker's timeouts and the readiness check do
//     not name; they fail only some calls (writes on a replica, one
//     command of the ACL) or come before the breaker opens;
//   - the failure policy answering in the store's place, at WARN: "store
//     did not answer a take, the failure policy (closed) answered:
//     resilient: no answer within the timeout" ("store failed a take"
//     for a store error such as NOPERM, "store circuit breaker open, the
//     failure policy (closed) answered a take" while a breaker is open,
//     of the cause that opened it), the next line of that cause saying
//     how many more answers the policy gave meanwhile; under the
//     unavailable policy, which answers nothing, "… the failure policy
//     (unavailable) failed the request". Without it
//     a store too slow for the per-call timeout, but not failing often
//     enough in a row to open the breaker, changed decisions with no
//     line at all (only store_fallbacks_total counted them).
//
// The breaker's lines name the policy too ("the failure policy (closed)
// answers until a probe succeeds") once the StoreLog knows it: from the
// server's store (WithStoreLog) or from the first answer of the policy.
//
// Each line is rate-limited: at most one per cause (the store's own text,
// without the key it was about) per StoreLogInterval, the next one saying
// how many were left out. Texts are cut at 300 bytes, and any URL in them
// is shown as store.RedactURL shows it (the stores' errors hold no
// password already).
//
// Create it before the store (NewStoreLog), give its Hooks to
// resilient.WithHooks, and the StoreLog to the server (WithStoreLog): its
// lines then become the server's events (the admin API, the dashboard),
// logged by the server's logger. Until then it logs on its own logger.
type StoreLog struct {
	mu     sync.Mutex
	log    *slog.Logger
	report func(level slog.Level, kind, msg string)
	now    func() time.Time
	// errs are the store errors reported, by cause.
	errs causelog.Limiter
	// trips are the breaker openings reported, by cause.
	trips causelog.Limiter
	// fallbacks are the failure policy's answers reported, by cause.
	fallbacks causelog.Limiter
	// policy is the failure policy's name ("open", "closed", "local",
	// "unavailable"), "" while unknown.
	policy string
	// openErr and openKind are the last *resilient.CircuitOpenError a
	// fallback had and its cause kind: while a breaker is open every call
	// answers with the same one, and its kind is not worked out again.
	openErr  *resilient.CircuitOpenError
	openKind string
	// tripCause is the cause of each partition's last opening, by
	// partition name ("" for a store with one breaker), reported or not.
	tripCause map[string]string
}

// maxCauses bounds the store errors, and the causes of breaker openings,
// StoreLog remembers; beyond it, those reported longest ago are forgotten
// first.
const maxCauses = 64

// maxPartitions bounds the partitions whose last cause StoreLog remembers
// (a Redis Cluster has 64, a memcached ring one per server); past it they
// are all forgotten, and the next re-opening of each is reported.
const maxPartitions = 4096

// NewStoreLog returns a StoreLog that logs on log (nil: slog.Default())
// until a server takes it over (WithStoreLog).
func NewStoreLog(log *slog.Logger) *StoreLog {
	if log == nil {
		log = slog.Default()
	}
	return &StoreLog{log: log, now: time.Now, tripCause: map[string]string{},
		errs:      causelog.Limiter{Interval: StoreLogInterval, Max: maxCauses},
		trips:     causelog.Limiter{Interval: StoreLogInterval, Max: maxCauses},
		fallbacks: causelog.Limiter{Interval: StoreLogInterval, Max: maxCauses}}
}

// WithStoreLog makes l report through the server (default none): l's lines
// become events, shown by the admin API and the dashboard and logged by
// the server's logger (WithLogger).
func WithStoreLog(l *StoreLog) Option { return func(s *Server) { s.storeLog = l } }

// attach makes l report through s, and learns the failure policy of s's
// store.
func (l *StoreLog) attach(s *Server) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.report = s.EventAt
	if rs, ok, _ := store.Under[*resilient.Store](s.store); ok {
		l.policy = rs.Policy().String()
	}
}

// policyLocked names the failure policy for a line: "the failure policy
// (closed)", or without the name while it is not known.
func (l *StoreLog) policyLocked() string {
	if l.policy == "" {
		return "the failure policy"
	}
	return "the failure policy (" + l.policy + ")"
}

func (l *StoreLog) emit(level slog.Level, msg string) {
	l.mu.Lock()
	report := l.report
	l.mu.Unlock()
	if report != nil {
		report(level, "store", msg)
		return
	}
	l.log.Log(context.Background(), level, msg, "event", "store")
}

// Hooks returns h with its Call, Tripped and Fallback hooks extended to
// report to l; h's own hooks (metrics.StoreHooks, say) run first,
// unchanged.
func (l *StoreLog) Hooks(h resilient.Hooks) resilient.Hooks {
	call, tripped, fallback := h.Call, h.Tripped, h.Fallback
	h.Call = func(op string, latency time.Duration, err error) {
		if call != nil {
			call(op, latency, err)
		}
		if err != nil {
			l.storeError(op, err)
		}
	}
	h.Tripped = func(err *resilient.CircuitOpenError) {
		if tripped != nil {
			tripped(err)
		}
		l.tripped(err)
	}
	h.Fallback = func(op string, p resilient.Policy, cause error) {
		if fallback != nil {
			fallback(op, p, cause)
		}
		l.fallback(op, p, cause)
	}
	return h
}

// fallback reports an answer of the failure policy p to a call op the
// store did not answer (cause), unless one of the same cause was reported
// within StoreLogInterval; the next report says how many were left out.
// While a breaker is open its cause is the failure that opened it, so that
// the failures before the opening and the refusals after it make one line.
func (l *StoreLog) fallback(op string, p resilient.Policy, cause error) {
	ce, _ := cause.(*resilient.CircuitOpenError)
	l.mu.Lock()
	l.policy = p.String()
	var kind string
	if ce != nil && ce == l.openErr {
		kind = l.openKind
	} else {
		l.mu.Unlock()
		root := cause
		if ce != nil && ce.Last != nil {
			root = ce.Last
		}
		kind = causeKind(causeText(root)) // regexps: outside the lock
		l.mu.Lock()
		if ce != nil {
			l.openErr, l.openKind = ce, kind
		}
	}
	ok, skipped := l.fallbacks.Pass(kind, l.now())
	who := l.policyLocked()
	l.mu.Unlock()
	if !ok {
		return
	}
	var msg string
	switch {
	case p == resilient.FailUnavailable && ce != nil:
		// No policy answers: the request fails (gRPC UNAVAILABLE, 503).
		msg = "store circuit breaker open, " + who + " failed a " + op + ": "
	case p == resilient.FailUnavailable && reportable(cause):
		msg = "store failed a " + op + ", " + who + " failed the request: "
	case p == resilient.FailUnavailable:
		msg = "store did not answer a " + op + ", " + who + " failed the request: "
	case ce != nil:
		msg = "store circuit breaker open, " + who + " answered a " + op + ": "
	case reportable(cause):
		msg = "store failed a " + op + ", " + who + " answered: "
	default:
		msg = "store did not answer a " + op + ", " + who + " answered: "
	}
	msg += shown(keyless(cause))
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d more answers of the policy with this cause since the last report)", skipped)
	}
	l.emit(slog.LevelWarn, msg)
}

// storeError reports err, a store call's, unless it is a timeout or a
// connection error or one reported within StoreLogInterval.
func (l *StoreLog) storeError(op string, err error) {
	if !reportable(err) {
		return
	}
	cause := causeKind(causeText(err))
	l.mu.Lock()
	ok, skipped := l.errs.Pass(cause, l.now())
	l.mu.Unlock()
	if !ok {
		return
	}
	msg := fmt.Sprintf("store error on %s: %s", op, shown(causeText(err)))
	if skipped > 0 {
		msg += fmt.Sprintf(" (%d more like it since the last report)", skipped)
	}
	l.emit(slog.LevelWarn, msg)
}

// tripped reports a breaker opening: a first opening unless its cause was
// reported within StoreLogInterval (for this partition or another), a
// re-opening only when the partition's cause changed, to one not reported
// within StoreLogInterval.
func (l *StoreLog) tripped(err *resilient.CircuitOpenError) {
	cause := "unknown"
	if err.Last != nil {
		cause = causeKind(causeText(err.Last))
	}
	l.mu.Lock()
	prev, seen := l.tripCause[err.Partition]
	if len(l.tripCause) >= maxPartitions && !seen {
		clear(l.tripCause)
	}
	l.tripCause[err.Partition] = cause
	ok, skipped := false, 0
	if err.Reopened && seen && prev == cause {
		l.trips.Skip(cause) // the partition's cause did not change
	} else {
		ok, skipped = l.trips.Pass(cause, l.now())
	}
	who, answers, answersKeys := l.policyLocked(), " answers", " answers its keys"
	if l.policy == resilient.FailUnavailable.String() {
		answers, answersKeys = " fails the requests", " fails the requests of its keys"
	}
	l.mu.Unlock()
	if !ok {
		return
	}
	var what string
	switch {
	case err.Partition == "" && err.Reopened:
		what = "store circuit breaker still open, with another failure: "
	case err.Partition == "":
		what = "store circuit breaker opened, " + who + answers + " until a probe succeeds: "
	case err.Reopened:
		what = "store circuit breaker for " + err.Partition + " still open, with another failure: "
	default:
		what = "store circuit breaker opened for " + err.Partition + ", " + who + answersKeys + " until a probe succeeds: "
	}
	msg := what + shown(keyless(err))
	if skipped > 0 {
		msg += fmt.Sprintf(" (opened %d more times with this cause since the last report)", skipped)
	}
	l.emit(slog.LevelWarn, msg)
}

// reportable reports whether err is a store error StoreLog reports: not a
// timeout or a connection error (the breaker and the readiness check
// report those), nor an error of the caller (a closed store, a cancelled
// context), nor an error that says no more than that the store is
// unavailable (the wrapper's own timeout).
func reportable(err error) bool {
	if errors.Is(err, store.ErrBadRequest) || errors.Is(err, store.ErrContention) {
		// A request the store refuses to keep (memcached: a state over the
		// server's item size, -I) fails the same way for every caller
		// until the configuration changes, and optimistic concurrency
		// that gave up (memcached's compare-and-swap on a hot key)
		// refuses requests while the store is up: the operator must
		// hear of both.
		return true
	}
	var ne net.Error
	for _, e := range []error{context.DeadlineExceeded, context.Canceled, os.ErrDeadlineExceeded, io.EOF, io.ErrUnexpectedEOF,
		net.ErrClosed, syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, store.ErrClosed, resilient.ErrCircuitOpen} {
		if errors.Is(err, e) {
			return false
		}
	}
	if errors.As(err, &ne) {
		return false
	}
	return len(causes(err, nil)) > 0
}

// sentinels are the errors that name a kind of failure, not its cause.
var sentinels = []error{store.ErrUnavailable, store.ErrContention, store.ErrBadRequest, store.ErrClosed, resilient.ErrCircuitOpen}

// causes appends the texts of err's innermost errors that are not
// sentinels: the store's own words (Redis' "READONLY You can't write…",
// memcached's server error, a network error with its address), without
// the operation and the key the stores wrap them in. An innermost error
// that is a Floodgate store's own text ("redis: …", "memcached: …": one
// that wraps no cause) has its quoted parts blanked, since that is how
// the stores name a key.
func causes(err error, out []string) []string {
	switch u := err.(type) {
	case *net.OpError:
		// "dial tcp 10.0.0.8:6379: connect: connection refused": the
		// address is the store's, and says which node.
		return append(out, err.Error())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = causes(e, out)
		}
		return out
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return causes(inner, out)
		}
	}
	for _, s := range sentinels {
		if err == s {
			return out
		}
	}
	text := err.Error()
	if strings.HasPrefix(text, "redis: ") || strings.HasPrefix(text, "memcached: ") {
		text = store.BlankQuoted(text)
	}
	return append(out, text)
}

// keyless is err's text for a log line and /readyz, without the operation
// and the key the store wrapped its cause in (a key holds descriptor
// values: a client's address, an API key): a
// *resilient.CircuitOpenError's with its last failure as causeText gives
// it, any other error's causeText — the store's own words ("dial tcp
// 10.0.0.5:6379: connect: connection refused", "READONLY …", memcached's
// server error) rather than `redis: peek "fg:…": store: unavailable: …`,
// or, for an error that wraps no cause of its own (the wrapper's timeout,
// a store not opened yet, memcached's contention), its text with its
// quoted parts blanked.
func keyless(err error) string {
	var ce *resilient.CircuitOpenError
	if !errors.As(err, &ce) {
		return causeText(err)
	}
	if ce.Last == nil {
		return ce.Error()
	}
	c := *ce
	c.Last = errors.New(causeText(ce.Last))
	return c.Error()
}

// causeText is what StoreLog tells causes apart by: err's causes, each
// told once, or its whole text when it has none beyond sentinels, quoted
// parts (a key) blanked and the stores' "redis: take "…": " (operation and
// key) left out. A call over several keys that fail alike (memcached's,
// one error per key of a server that went away) is one cause, whatever
// the number of keys: joined as many times, each count was a cause of its
// own, logged again as a probe's number of keys changed.
func causeText(err error) string {
	if c := causes(err, nil); len(c) > 0 {
		var once []string
		for _, t := range c {
			if !slices.Contains(once, t) {
				once = append(once, t)
			}
		}
		return strings.Join(once, "; ")
	}
	return opKey.ReplaceAllString(store.BlankQuoted(err.Error()), "")
}

// opKey finds, in a text whose quoted parts are blanked, the operation and
// the key the Redis and memcached stores put before their cause:
// `redis: take "…": `, `memcached take "…": `, `memcached: key "…": `.
var opKey = regexp.MustCompile(`\b(?:redis|memcached):? [a-z][a-z ]* "…": `)

// causeKind is cause with its numbers, hex digests and quoted parts
// blanked: what the rate limit of the log counts as one cause, so that a
// cause whose text names a slot, an address, a value or a script (Redis'
// "MOVED 3999 10.0.0.7:6379", memcached's counter values, Redis' "script:
// 7311…, on @user_script:40") is one cause, not one per slot, value or
// script.
func causeKind(cause string) string {
	return causeVaries.ReplaceAllString(cause, "#")
}

var causeVaries = regexp.MustCompile(`\b[0-9a-f]{16,}\b|[0-9]+|"[^"]*"|'[^']*'`)

// maxShown bounds the length of a reported error's text, as
// resilient.CircuitOpenError bounds its cause: a script error can quote a
// long script.
const maxShown = 300

// urlPattern finds URLs in an error's text, for shown to redact.
var urlPattern = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"']*`)

// shown is an error's text as StoreLog logs it: URLs redacted, cut at
// maxShown bytes.
func shown(text string) string {
	text = urlPattern.ReplaceAllStringFunc(text, store.RedactURL)
	if len(text) > maxShown {
		cut := maxShown
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	return text
}
