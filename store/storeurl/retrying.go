package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/redis"
)

// Backoff bounds of OpenRetrying (see WithRetryBackoff).
const (
	DefaultRetryMin = 250 * time.Millisecond
	DefaultRetryMax = 5 * time.Second
)

// ErrNotOpen is wrapped by every error a Retrying store returns before its
// store has opened. It wraps store.ErrUnavailable, so that a failure policy
// (store/resilient) answers for the store meanwhile.
var ErrNotOpen = fmt.Errorf("storeurl: store not opened yet: %w", store.ErrUnavailable)

// WithLogger sets where OpenRetrying reports a store that could not be
// opened (WARN, once, with the error), the retries that fail after it
// (DEBUG; a retry that reaches the store and is refused for a reason that
// may not pass by itself, such as a user the ACL stops, at WARN, once a
// cause) and the store opening at last (INFO). Default: nothing is
// logged. Open ignores it.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithMeanwhile sets what OpenRetrying's WARN says answers while the
// store is not open (default "the failure policy answers meanwhile"): a
// peer region's store, say, whose region limits on its share instead.
func WithMeanwhile(what string) Option { return func(c *config) { c.meanwhile = what } }

// WithRetryBackoff sets the wait of OpenRetrying between two attempts: min
// after the first failure, doubled after each, at most max, each wait
// shortened at random by up to a fifth so that a fleet restarted together
// does not retry in step. Defaults DefaultRetryMin and DefaultRetryMax.
// Open ignores it.
func WithRetryBackoff(min, max time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = min, max }
}

// Transient reports whether err, an error of Open, may pass by itself: the
// store could not be reached (connection refused or reset, a timeout, a
// name that did not resolve) or said it is loading its data. A bad URL, a
// server of the wrong kind (a replica, a Sentinel or a Cluster node behind
// redis://), a user the ACL or the password stops, or a server that
// answered with any other error is not: retrying would not change it.
// Nor is a URL whose scheme does not match the server's TLS, which fails
// as a timeout or a dropped connection but store/redis and
// store/memcached tell apart (rediss:// or memcacheds:// at a plain
// server, redis:// or memcached:// at a TLS port), nor a memcacheds:// or
// rediss:// server that refused the TLS connection (it wants a client
// certificate; for Redis the error wraps redis.ErrPermission) or whose
// certificate is not trusted.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrBadURL) || errors.Is(err, redis.ErrBadURL) || errors.Is(err, redis.ErrPermission) {
		return false
	}
	if errors.Is(err, redis.ErrTLSMismatch) || errors.Is(err, memcached.ErrTLSMismatch) {
		// A scheme that does not match the server's TLS: the handshake
		// timed out or the server dropped the connection, which would
		// pass for a server not up yet, but store/redis or
		// store/memcached asked again and found which. No retry opens it, and a
		// failure policy would answer for it for as long as the process
		// runs (FailOpen: every request admitted).
		return false
	}
	var ne net.Error
	var cte *memcache.ConnectTimeoutError
	switch {
	case errors.As(err, &ne), errors.As(err, &cte),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return true
	}
	// A Redis restarted with a large data set answers LOADING until it
	// has read it.
	return errors.Is(err, store.ErrUnavailable) && strings.Contains(err.Error(), "LOADING ")
}

// OpenRetrying opens the store as Open does. When that fails for a reason
// that may pass (Transient), it returns a *Retrying store instead of the
// error: it answers every call with an error wrapping ErrNotOpen (hence
// store.ErrUnavailable) while a goroutine retries Open with backoff
// (WithRetryBackoff) until it succeeds, then passes every call to the
// opened store. Any other error of Open is returned as it is. A store that
// opens at once is returned unwrapped. Options are Open's, with
// WithLogger and WithRetryBackoff.
//
// A memcached ring opens, at once or at a retry, as soon as one of its
// servers answers (memcached.WithPartialStart; Open fails when any does
// not): the keys of the servers that answered are decided by the store,
// those of the others fail as a dead server's do while running, with
// errors wrapping store.ErrUnavailable that name their server, one
// store.Partitioner partition per server (so that store/resilient's
// breaker per server answers them with the failure policy and takes them
// back once their server answers), and the ring maps every key as with
// all its servers up. Each server that did not answer is logged at WARN;
// an opening at a retry is logged as "store opened; N of M memcached
// servers not answering". A ring none of whose servers answers is
// retried as any other store.
func OpenRetrying(rawURL string, opts ...Option) (store.Store, error) {
	opts = append(slices.Clip(opts), WithMemcachedOptions(memcached.WithPartialStart()))
	c := config{retryMin: DefaultRetryMin, retryMax: DefaultRetryMax}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	st, err := Open(rawURL, opts...)
	if err == nil {
		warnUnanswered(c.log, Redact(rawURL), st)
	}
	if err == nil || !Transient(err) {
		return st, err
	}
	if c.retryMin <= 0 {
		c.retryMin = DefaultRetryMin
	}
	c.retryMax = max(c.retryMax, c.retryMin)
	r := &Retrying{
		url:   Redact(rawURL),
		open:  func() (store.Store, error) { return Open(rawURL, opts...) },
		log:   c.log,
		min:   c.retryMin,
		max:   c.retryMax,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		start: time.Now(),
	}
	r.lastErr = err
	if r.log != nil {
		meanwhile := c.meanwhile
		if meanwhile == "" {
			meanwhile = "the failure policy answers meanwhile"
		}
		r.log.Warn("store not opened at start, retrying in the background; "+meanwhile,
			"store", r.url, "err", err)
	}
	go r.loop()
	return r, nil
}

// warnUnanswered logs at WARN each server of a memcached ring that did
// not answer when st was opened (memcached.WithPartialStart).
func warnUnanswered(log *slog.Logger, url string, st store.Store) {
	mc, ok := st.(*memcached.Store)
	if !ok || log == nil {
		return
	}
	down := mc.Unanswered()
	for _, u := range down {
		log.Warn(fmt.Sprintf("memcached server not answering when the store opened (%d of %d); its keys fail, answered by the failure policy, until it answers; the other servers' keys are decided by the store", len(down), len(mc.Servers())),
			"store", url, "server", u.Addr, "err", u.Err)
	}
}

// Retrying is a store that was not reachable when OpenRetrying was called:
// until a retry opens it, every call fails with an error wrapping
// ErrNotOpen; then every call goes to the opened store, whose optional
// interfaces (store.Inspector, store.Renewer) it passes on and which
// Unwrap returns. Safe for concurrent use.
type Retrying struct {
	url      string
	open     func() (store.Store, error)
	log      *slog.Logger
	min, max time.Duration
	start    time.Time

	stop chan struct{}
	done chan struct{}

	mu       sync.RWMutex
	inner    store.Store // nil until opened
	lastErr  error
	attempts int
	closed   bool
}

func (r *Retrying) loop() {
	defer close(r.done)
	wait := r.min
	var warned string
	for attempt := 2; ; attempt++ {
		t := time.NewTimer(wait - time.Duration(rand.Int64N(int64(wait)/5+1)))
		select {
		case <-r.stop:
			t.Stop()
			return
		case <-t.C:
		}
		st, err := r.open()
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			if st != nil {
				_ = st.Close()
			}
			return
		}
		r.attempts = attempt
		if err == nil {
			r.inner = st
			r.mu.Unlock()
			if r.log != nil {
				msg := "store opened"
				if mc, ok := st.(*memcached.Store); ok && len(mc.Unanswered()) > 0 {
					msg = fmt.Sprintf("store opened; %d of %d memcached servers not answering", len(mc.Unanswered()), len(mc.Servers()))
				}
				r.log.Info(msg, "store", r.url, "attempts", attempt, "after", time.Since(r.start).Round(time.Millisecond).String())
				warnUnanswered(r.log, r.url, st)
			}
			return
		}
		r.lastErr = err
		r.mu.Unlock()
		if !Transient(err) && r.log != nil && err.Error() != warned {
			// Reachable now, but refused: retried all the same, since the
			// server may be coming up (or its configuration fixed); said
			// at WARN, once a cause, because it may not pass by itself.
			warned = err.Error()
			r.log.Warn("store answers but cannot be used; retrying", "store", r.url, "err", err)
		} else if r.log != nil {
			r.log.Debug("store still not opened", "store", r.url, "attempts", attempt, "err", err)
		}
		wait = min(2*wait, r.max)
	}
}

// get returns the opened store, or an error wrapping ErrNotOpen that says
// why the last attempt failed.
func (r *Retrying) get() (store.Store, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch {
	case r.inner != nil:
		return r.inner, nil
	case r.closed:
		return nil, store.ErrClosed
	}
	return nil, fmt.Errorf("%w (%s; last attempt: %v)", ErrNotOpen, r.url, r.lastErr)
}

// Unwrap returns the opened store, or nil before it opens.
func (r *Retrying) Unwrap() store.Store {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.inner
}

// Take passes to the opened store.
func (r *Retrying) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	st, err := r.get()
	if err != nil {
		return store.Result{}, err
	}
	return st.Take(ctx, reqs, out)
}

// Peek passes to the opened store.
func (r *Retrying) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	st, err := r.get()
	if err != nil {
		return err
	}
	return st.Peek(ctx, reqs, out)
}

// Refund passes to the opened store.
func (r *Retrying) Refund(ctx context.Context, reqs []store.Request) error {
	st, err := r.get()
	if err != nil {
		return err
	}
	return st.Refund(ctx, reqs)
}

// Release passes to the opened store.
func (r *Retrying) Release(ctx context.Context, reqs []store.Request) error {
	st, err := r.get()
	if err != nil {
		return err
	}
	return st.Release(ctx, reqs)
}

// Reset passes to the opened store.
func (r *Retrying) Reset(ctx context.Context, keys ...string) error {
	st, err := r.get()
	if err != nil {
		return err
	}
	return st.Reset(ctx, keys...)
}

// Renew passes to the opened store when it is a store.Renewer (every store
// of this module is) and does nothing otherwise, as store/lease does.
func (r *Retrying) Renew(ctx context.Context, reqs []store.Request) error {
	st, err := r.get()
	if err != nil {
		return err
	}
	if rn, ok := st.(store.Renewer); ok {
		return rn.Renew(ctx, reqs)
	}
	return nil
}

// Inspect passes to the opened store; it fails with an error wrapping
// errors.ErrUnsupported when that store is not a store.Inspector.
func (r *Retrying) Inspect(ctx context.Context, key string) (algo.State, bool, error) {
	st, err := r.get()
	if err != nil {
		return algo.State{}, false, err
	}
	in, ok := st.(store.Inspector)
	if !ok {
		return algo.State{}, false, fmt.Errorf("storeurl: inspect: %w by %T", errors.ErrUnsupported, st)
	}
	return in.Inspect(ctx, key)
}

// Close stops the retries (waiting for an attempt in progress, bounded by
// the store client's timeout) and closes the opened store, if any. A
// second Close does nothing.
func (r *Retrying) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	st := r.inner
	r.mu.Unlock()
	close(r.stop)
	<-r.done
	if st != nil {
		return st.Close()
	}
	return nil
}
