package memcached

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Store is a store.Store on one or several memcached servers. It is safe
// for concurrent use. Create it with Open.
type Store struct {
	cfg     config
	mc      *memcache.Client
	ring    *ring
	keys    keyer
	skewSec int64
	closed  atomic.Bool
	stats   stats
	shapes  shapes
	seed    maphash.Seed
	locks   [lockStripes]sync.Mutex
	pipes   []*pipePool        // per server: the connections of multi-key Takes
	trips   []atomic.Int64     // per server: round trips begun (tests)
	noTrips atomic.Int64       // the round trips of an address not in the ring (none)
	down    []UnansweredServer // did not answer Open's check (WithPartialStart)
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.Inspector        = (*Store)(nil)
	_ store.RequestInspector = (*Store)(nil)
)

// Open connects to the servers of a memcached://host:port[,host:port] URL.
// Keys are spread over several servers by a ketama consistent-hash ring.
// Open reads every server's settings (stats settings), so that a wrong
// address fails here rather than on the first decision (an error wrapping
// store.ErrUnavailable), and so does a server that does not speak the
// text protocol (-B binary, SASL) or runs with compare-and-swap disabled
// (-C, which every algorithm but the two windows needs). The item size
// limit is the smallest of WithMaxItemSize and the servers' own (-I).
//
// memcacheds://host:port[,host:port] speaks TLS to every server of the
// ring (memcached -Z; AWS ElastiCache's in-transit encryption): each
// connection's handshake, within WithTimeout as its dial is, verifies the
// server's certificate against the system roots (SSL_CERT_FILE and
// SSL_CERT_DIR replace them) and the server's host as the URL writes it;
// WithTLS gives other roots, a client certificate or a server name. A
// certificate that is not trusted fails Open with an error that names the
// server and says why (x509: certificate signed by unknown authority).
// memcacheds:// at a plain server, and memcached:// at a TLS one, fail
// Open with an error wrapping ErrTLSMismatch (and store.ErrUnavailable)
// that says which, within about twice the timeout.
//
// Options and their defaults:
//
//	WithClock(time.Now)            the clock decisions use
//	WithTimeout(200ms)             per round trip
//	WithMaxIdleConns(max(64, 8×GOMAXPROCS)) idle connections per server
//	WithRetries(16)                compare-and-swap retries before ErrContention
//	WithBackoff(50µs, 5ms)         jittered backoff between retries
//	WithKeyPrefix("fg:")           prefix of every key
//	WithClockSkew(1s)              tolerated clock difference between instances
//	WithMaxItemSize(1 MiB)         the servers' -I
//	WithPartialStart: off          a server that does not answer fails Open
//	WithTLS(nil)                   memcacheds:// verifies against the system roots
func Open(url string, opts ...Option) (*Store, error) {
	servers, useTLS, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("memcached: nil Option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.tls != nil && !useTLS {
		return nil, fmt.Errorf("memcached: Open: WithTLS given with the store URL %q, which speaks plain TCP: use memcacheds:// for servers that speak TLS", store.RedactURL(url))
	}
	r, err := buildRing(servers, !cfg.partial)
	if err != nil {
		return nil, fmt.Errorf("memcached: store URL %q: %w", store.RedactURL(url), err)
	}
	var tlsFor map[string]*tls.Config // nil: plain TCP
	if useTLS {
		tlsFor = tlsConfigs(r.addrs, cfg.tls)
	}
	s := &Store{
		cfg:     cfg,
		ring:    r,
		keys:    keyer{prefix: cfg.prefix},
		skewSec: int64((cfg.skew + time.Second - 1) / time.Second),
		seed:    maphash.MakeSeed(),
		trips:   make([]atomic.Int64, len(r.addrs)),
	}
	netDial := dialNet(cfg.timeout, tlsFor)
	dial := dialer(netDial, s.tripsFor)
	mc := memcache.NewFromSelector(r)
	mc.Timeout = cfg.timeout
	mc.MaxIdleConns = cfg.maxIdleConns
	mc.DialContext = dial
	s.mc = mc
	for _, a := range r.addrs {
		s.pipes = append(s.pipes, &pipePool{
			addr: a.String(),
			dial: func(ctx context.Context, network, address string) (*checkedConn, error) {
				nc, err := dial(ctx, network, address)
				if err != nil {
					return nil, err
				}
				return nc.(*checkedConn), nil
			},
			timeout: cfg.timeout,
			maxIdle: cfg.maxIdleConns,
		})
	}
	if !cfg.skipCheck {
		if s.cfg.maxItemSize, s.down, err = checkServers(r.addrs, netDial, useTLS, cfg.timeout, cfg.maxItemSize, cfg.partial); err != nil {
			mc.Close()
			return nil, fmt.Errorf("%w (store URL %q)", err, store.RedactURL(url))
		}
	}
	return s, nil
}

// Unanswered returns the servers that did not answer Open's check, in the
// URL's order, with why; nil when every server answered (always, without
// WithPartialStart). It says what Open found, not what the servers do
// now: the keys of such a server fail until it answers, then go to it,
// with nothing for the caller to do.
func (s *Store) Unanswered() []UnansweredServer { return slices.Clone(s.down) }

// tripsFor returns the round-trip counter of the server at address.
func (s *Store) tripsFor(address string) *atomic.Int64 {
	for i, a := range s.ring.addrs {
		if a.String() == address {
			return &s.trips[i]
		}
	}
	return &s.noTrips
}

// Stats are counters of a Store's work since Open. CASRetries ÷ CASOps is
// the compare-and-swap retries per decision, the measure of contention.
type Stats struct {
	// CounterOps counts decisions, refunds and roll-backs made on the
	// window counters (fixed and sliding window).
	CounterOps uint64
	// CASOps counts operations on compare-and-swap state (every other
	// algorithm) that completed, whether or not they wrote.
	CASOps uint64
	// CASRetries counts compare-and-swap attempts lost to a concurrent
	// writer and tried again.
	CASRetries uint64
	// Contention counts operations that ran out of retries and failed with
	// store.ErrContention, nothing charged.
	Contention uint64
	// Rollbacks counts charges undone: refused counter increments and the
	// keys of a multi-key Take refunded because another key refused.
	Rollbacks uint64
}

type stats struct {
	counterOps, casOps, casRetries, contention, rollbacks atomic.Uint64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		CounterOps: s.stats.counterOps.Load(),
		CASOps:     s.stats.casOps.Load(),
		CASRetries: s.stats.casRetries.Load(),
		Contention: s.stats.contention.Load(),
		Rollbacks:  s.stats.rollbacks.Load(),
	}
}

// nowUS is the store's clock in µs since the epoch.
func (s *Store) nowUS() int64 { return s.cfg.now().UnixMicro() }

// Servers returns the server addresses from the URL, in order.
func (s *Store) Servers() []string {
	out := make([]string, len(s.ring.addrs))
	for i, a := range s.ring.addrs {
		out[i] = a.String()
	}
	return out
}

// ServerFor returns the address of the server that holds key's state.
func (s *Store) ServerFor(key string) string {
	return s.ring.addrs[s.ring.server(s.keys.state(key))].String()
}

func (s *Store) check(reqs []store.Request, out []algo.Decision) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return store.Check(reqs, out)
}

// Take decides reqs as one all-or-nothing acquisition. Memcached cannot
// lock several keys, so every key is charged and, when one refuses, those
// charged are undone (reserve then roll back): a compare-and-swap state
// that nobody changed since is put back as it was, one that changed is
// given algo.Limit.Refund (concurrency: the slots just taken are removed),
// and a window counter is decremented. The keys' commands are pipelined,
// one round trip per server and step, the servers concurrently (see
// batch.go), so that a Take of many keys costs no more round trips than
// one of two. Between the charge and the undo another caller may find
// those units taken: an all-or-nothing Take can make a concurrent one
// refuse, never admit too much. On a refusal, out is what each request
// alone would get with nothing charged (store.Take's rule), except that
// the request that refused (the first in reqs) keeps its refusal: looked
// at again it may pass once the units in flight that refused it are
// given back, and out must still name a refusing request.
func (s *Store) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := s.check(reqs, out); err != nil {
		return store.Result{}, err
	}
	now := s.nowUS()
	if len(reqs) != 1 {
		if len(reqs) == 0 {
			return store.Result{At: now, Allowed: true}, nil
		}
		return s.takeBatch(ctx, reqs, out, now)
	}
	d, err := s.take(ctx, &reqs[0], &now)
	res := store.Result{At: now}
	if err != nil {
		if d.Limit != 0 && !d.Allowed {
			// Refused, and the decr giving its increment back failed:
			// the refusal stands (Result.Partial), the units staying
			// charged until the window ends. As an error alone, the
			// caller's failure policy would answer it, and failing
			// open admit what the server refused.
			out[0], res.Partial = d, true
		}
		return res, err
	}
	out[0] = d
	res.Allowed = d.Allowed
	return res, nil
}

// chargedBefore reports whether request i's key is one an earlier
// request of reqs charged: its refusal may then be this Take's own doing,
// and alone, as storetest.Reference decides it, it may pass.
func chargedBefore(reqs []store.Request, i int) bool {
	for j := range i {
		if reqs[j].Key == reqs[i].Key {
			return true
		}
	}
	return false
}

// take charges one request at *now, or reports why it cannot be; a
// compare-and-swap state is decided at a later time when the clock has
// moved on before its last attempt (see update), which goes to *now.
func (s *Store) take(ctx context.Context, r *store.Request, now *int64) (algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, err
	}
	switch r.Limit.Algorithm() {
	case algo.FixedWindow:
		return s.takeFixed(r, *now)
	case algo.SlidingWindow:
		return s.takeSliding(r, *now)
	}
	l, cost, lease := r.Limit, r.Cost, r.Lease
	return s.update(ctx, r.Key, l, now, s.cfg.retries, func(st *algo.State, _ bool) (algo.Decision, writeMode) {
		d := l.TakeLease(st, *now, cost, lease)
		if d.Allowed && cost > 0 {
			return d, mustWrite
		}
		return d, tryWrite
	})
}

// ctxErr reports whether err is ctx's own error: the call's deadline
// passed (or its caller left) between two keys, which says nothing about
// the server of either.
func (s *Store) ctxErr(ctx context.Context, err error) bool {
	cerr := ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// placed wraps err, the failure of a call over reqs that ran the requests
// before reached (in order) and stopped there, in a *store.PartitionError
// naming the servers (partitions) of the requests failed as failed and
// those of the requests it did not reach, less the servers it did reach,
// as skipped, so that store/resilient counts the failure against the
// failing servers only and as a success for the others. It returns err as
// it is when the call is over one server, or when no request is to blame.
func (s *Store) placed(err error, reqs []store.Request, failed []int, reached int) error {
	if err == nil || len(failed) == 0 || len(s.ring.addrs) == 1 || len(reqs) < 2 {
		return err
	}
	parts := make([]int, len(reqs))
	for i := range reqs {
		parts[i] = s.Partition(reqs[i].Key)
	}
	var bad, ran, skipped []int
	for _, i := range failed {
		bad = append(bad, parts[i])
	}
	slices.Sort(bad)
	bad = slices.Compact(bad)
	ran = append(ran, parts[:min(reached, len(parts))]...)
	for _, p := range parts[min(reached, len(parts)):] {
		if !slices.Contains(ran, p) && !slices.Contains(bad, p) {
			skipped = append(skipped, p)
		}
	}
	slices.Sort(skipped)
	skipped = slices.Compact(skipped)
	if len(bad) == 1 && len(skipped) == 0 && !slices.ContainsFunc(ran, func(p int) bool { return p != bad[0] }) {
		return err // one server in all
	}
	return &store.PartitionError{Err: err, Failed: bad, Skipped: skipped}
}

// dropNewestLeases removes the newest cost slots held under lease from a
// Concurrency state (Ext holds (lease, expiry) pairs in order of expiry):
// the slots a Take just added. algo.Limit.Release would drop every slot of
// the lease, including those of the anonymous lease 0 that other callers
// hold.
func dropNewestLeases(st *algo.State, lease uint64, cost int64) bool {
	changed := false
	for i := len(st.Ext) - 2; i >= 0 && cost > 0; i -= 2 {
		if uint64(st.Ext[i]) == lease {
			st.Ext = append(st.Ext[:i], st.Ext[i+2:]...)
			cost--
			changed = true
		}
	}
	return changed
}

// Peek fills out with each request's decision on its own, charging
// nothing. The items of several requests are read in one round trip per
// server, the servers concurrently (see multikey.go).
func (s *Store) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := s.check(reqs, out); err != nil {
		return err
	}
	now := s.nowUS()
	switch len(reqs) {
	case 0:
		return nil
	case 1:
		d, err := s.peek(ctx, &reqs[0], now)
		if err != nil {
			return err
		}
		out[0] = d
		return nil
	}
	return s.peekBatch(ctx, reqs, out, now)
}

func (s *Store) peek(ctx context.Context, r *store.Request, now int64) (algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return algo.Decision{}, err
	}
	switch r.Limit.Algorithm() {
	case algo.FixedWindow:
		return s.peekFixed(r, now)
	case algo.SlidingWindow:
		return s.peekSliding(r, now)
	}
	st, _, _, _, err := s.load(r.Key, r.Limit, now)
	if err != nil {
		return algo.Decision{}, err
	}
	return r.Limit.Peek(&st, now, r.Cost), nil
}

// Refund gives back units admitted by an earlier Take at Request.At (zero:
// now). Window counters are decremented in the window that counted them;
// the other algorithms apply algo.Limit.Refund under compare-and-swap.
// Concurrency slots are given back by Release, not Refund. The requests
// of several keys are refunded in two round trips per server (one when
// they are all window counters), the servers concurrently (see
// multikey.go); a failure on one server does not keep the others' keys
// from being refunded, and the error (a *store.PartitionError over
// several servers) names the servers that failed. A deadline that passes
// midway fails only the requests whose commands were not yet sent (not
// refunded at all, to send again), and one that passes after the last
// step fails none: a refund that landed returns nil.
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	if err := s.check(reqs, nil); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.nowUS()
	if len(reqs) != 1 {
		return s.refundBatch(ctx, reqs, now)
	}
	r := &reqs[0]
	at := r.At
	if at == 0 {
		at = now
	}
	if r.Cost == 0 {
		return nil
	}
	switch r.Limit.Algorithm() {
	case algo.FixedWindow, algo.SlidingWindow:
		return s.refundCounter(r, at)
	case algo.Concurrency:
		return nil
	}
	l, cost := r.Limit, r.Cost
	_, err := s.update(ctx, r.Key, l, &now, s.cfg.retries, func(st *algo.State, live bool) (algo.Decision, writeMode) {
		if !live {
			return algo.Decision{}, noWrite
		}
		l.Refund(st, now, at, cost)
		return algo.Decision{}, mustWrite
	})
	return err
}

// Release gives back the Concurrency leases (Request.Lease) of reqs;
// requests of other algorithms are ignored.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	return s.eachLease(ctx, reqs, (*algo.Limit).Release)
}

// Renew extends the Concurrency leases (Request.Lease) of reqs to expire
// their limit's LeaseTTL from now, under compare-and-swap (store.Renewer);
// a lease that has expired or been released is not revived, and requests
// of other algorithms are ignored.
func (s *Store) Renew(ctx context.Context, reqs []store.Request) error {
	return s.eachLease(ctx, reqs, (*algo.Limit).Renew)
}

// eachLease applies op (Release or Renew) to the lease of each Concurrency
// request, under compare-and-swap, writing the state when op changed it.
// A key that fails does not keep the others from their release or
// renewal: a server's failure fails the requests of its keys (its keys
// after the first failure are not tried, as they would fail alike, a
// timeout each), and the other servers' keys are still done, so that a
// dead server neither keeps a live one's slots taken until their
// LeaseTTL nor lets a live one's leases expire under holders still
// running. The caller's context ending stops the call there.
func (s *Store) eachLease(ctx context.Context, reqs []store.Request, op func(*algo.Limit, *algo.State, int64, uint64) bool) error {
	if err := s.check(reqs, nil); err != nil {
		return err
	}
	now := s.nowUS()
	var (
		errs   []error
		failed []int
		down   map[int]error // servers whose key failed unreachable, by partition
	)
	for i := range reqs {
		r := &reqs[i]
		if r.Limit.Algorithm() != algo.Concurrency {
			continue
		}
		p := s.Partition(r.Key)
		if cause, ok := down[p]; ok {
			errs = append(errs, fmt.Errorf("memcached %q: not tried, its server failed on an earlier key: %w", r.Key, cause))
			failed = append(failed, i)
			continue
		}
		l, lease := r.Limit, r.Lease
		_, err := s.update(ctx, r.Key, l, &now, s.cfg.retries, func(st *algo.State, live bool) (algo.Decision, writeMode) {
			return algo.Decision{}, must(live && op(l, st, now, lease))
		})
		if err == nil {
			continue
		}
		if s.ctxErr(ctx, err) {
			errs = append(errs, err)
			return s.placed(joinKeyErrors(errs), reqs, failed, i)
		}
		errs, failed = append(errs, err), append(failed, i)
		if errors.Is(err, store.ErrUnavailable) {
			if down == nil {
				down = map[int]error{}
			}
			down[p] = err
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return s.placed(joinKeyErrors(errs), reqs, failed, len(reqs))
}

// Reset forgets the keys: their compare-and-swap state, and the window
// counters of every window limit this Store has used (memcached cannot list
// keys, so the counters of a window shape only other instances have used,
// or of more than 256 shapes, are left to expire: ResetRequests, given the
// limits, finds them).
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	now := s.nowUS()
	for _, key := range keys {
		if key == "" {
			return fmt.Errorf("%w: Reset: empty key", store.ErrBadRequest)
		}
		if err := s.forget(ctx, key, s.windowKeys(key, now)); err != nil {
			return err
		}
	}
	return nil
}

// ResetRequests forgets each request's Key as Reset does and, whether or
// not this Store has used its Limit, the window counters that limit names
// (store.RequestInspector): a fixed window's counter of the window holding
// now, a sliding window's sub-windows within its period, each also at now
// ± the clock skew tolerance, so that the counters of an instance whose
// clock is off by up to WithClockSkew go too.
func (s *Store) ResetRequests(ctx context.Context, reqs []store.Request) error {
	if err := s.check(reqs, nil); err != nil {
		return err
	}
	now := s.nowUS()
	for i := range reqs {
		r := &reqs[i]
		if err := s.forget(ctx, r.Key, append(s.windowKeys(r.Key, now), s.limitWindowKeys(r.Key, r.Limit, now)...)); err != nil {
			return err
		}
	}
	return nil
}

// limitWindowKeys lists the window counters key may have under l at now
// and at now ± the skew tolerance; none for the other algorithms.
func (s *Store) limitWindowKeys(key string, l *algo.Limit, now int64) []string {
	skew := s.skewSec * 1_000_000
	var keys []string
	for _, at := range []int64{now - skew, now, now + skew} {
		switch l.Algorithm() {
		case algo.FixedWindow:
			start, _ := windowBounds(l, at)
			keys = append(keys, s.keys.fixed(key, start))
		case algo.SlidingWindow:
			sub, n := subWindow(l)
			keys = append(keys, s.keys.sliding(key, sub, at/sub, n)...)
		}
	}
	return keys
}

// forget deletes key's compare-and-swap state and those of the window
// counters in windows that exist.
func (s *Store) forget(ctx context.Context, key string, windows []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cand := append([]string{s.keys.state(key)}, windows...)
	slices.Sort(cand[1:])
	cand = slices.Compact(cand)
	found, err := s.mc.GetMulti(cand)
	if err != nil {
		return s.unavailable("reset", key, err)
	}
	for k := range found {
		if err := s.mc.Delete(k); err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			return s.unavailable("reset", key, err)
		}
	}
	return nil
}

// Inspect returns key's state: its compare-and-swap state if it has one,
// otherwise its window counters under the first window limit this Store
// has used that finds any, laid out as algo.State for that limit
// (InspectRequest, given the limit, finds counters of any limit).
func (s *Store) Inspect(ctx context.Context, key string) (algo.State, bool, error) {
	if s.closed.Load() {
		return algo.State{}, false, store.ErrClosed
	}
	if key == "" {
		return algo.State{}, false, fmt.Errorf("%w: Inspect: empty key", store.ErrBadRequest)
	}
	if err := ctx.Err(); err != nil {
		return algo.State{}, false, err
	}
	now := s.nowUS()
	st, found, err := s.inspectState(key, now)
	if err != nil || found {
		return st, found, err
	}
	for _, l := range s.shapes.list() {
		st, found, err := s.loadWindow(key, l, now)
		if err != nil || found {
			return st, found, err
		}
	}
	return algo.State{}, false, nil
}

// InspectRequest returns the state of req.Key under req.Limit
// (store.RequestInspector): a window limit's counters, laid out as
// algo.State for it, whether or not this Store has used that limit;
// another algorithm's compare-and-swap state.
func (s *Store) InspectRequest(ctx context.Context, req store.Request) (algo.State, bool, error) {
	if err := s.check([]store.Request{req}, nil); err != nil {
		return algo.State{}, false, err
	}
	if err := ctx.Err(); err != nil {
		return algo.State{}, false, err
	}
	now := s.nowUS()
	switch req.Limit.Algorithm() {
	case algo.FixedWindow, algo.SlidingWindow:
		return s.loadWindow(req.Key, req.Limit, now)
	}
	return s.inspectState(req.Key, now)
}

// inspectState reads key's compare-and-swap state; an expired one is
// not found.
func (s *Store) inspectState(key string, now int64) (algo.State, bool, error) {
	it, err := s.mc.Get(s.keys.state(key))
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
		return algo.State{}, false, nil
	case err != nil:
		return algo.State{}, false, s.unavailable("inspect", key, err)
	}
	var st algo.State
	_, exp, err := decodeState(it.Value, &st)
	if err != nil {
		return algo.State{}, false, fmt.Errorf("memcached: key %q: %w", key, err)
	}
	if exp > now {
		return st, true, nil
	}
	return algo.State{}, false, nil
}

// Close closes the idle connections; every later call fails with
// store.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	for _, p := range s.pipes {
		p.close()
	}
	return s.mc.Close()
}

// unavailable wraps a client error as store.ErrUnavailable with where it
// happened: the operation, the key and, unless the error already names
// it (a dial's or a pipe's does), the server that holds the key. A
// connection the server closed fails with a bare EOF, a server's refusal
// with its own words: neither says which server of the ring it was.
func (s *Store) unavailable(op, key string, err error) error {
	at := ""
	if addr := s.ServerFor(key); !strings.Contains(err.Error(), addr) {
		at = " on server " + addr
	}
	if errors.Is(err, memcache.ErrMalformedKey) {
		return fmt.Errorf("%w: memcached %s %q%s: %w", store.ErrBadRequest, op, key, at, err)
	}
	if strings.Contains(err.Error(), "out of memory storing object") {
		// A server started with -M refuses new items once its -m is used
		// up, instead of evicting.
		return fmt.Errorf("%w: memcached %s %q%s: the server is full and started with -M, so it refuses new items instead of evicting: raise its -m (docs/STORES.md sizes it), or run it without -M (evicted limits start afresh): %w",
			store.ErrUnavailable, op, key, at, err)
	}
	return fmt.Errorf("%w: memcached %s %q%s: %w", store.ErrUnavailable, op, key, at, err)
}

// maxRelativeTTL is memcached's rule: an expiration up to 30 days is
// relative, anything larger is an absolute Unix time.
const maxRelativeTTL = 30 * 24 * 3600

// expiration converts the instant (µs, on the store's clock) after which an
// entry is useless into memcached's expiration field: whole seconds, rounded
// up, plus the clock-skew tolerance and one second for memcached's own
// one-second clock ticks. Beyond 30 days it is an absolute Unix time, taken
// from the machine's wall clock since the server compares it with its own.
func (s *Store) expiration(expiresAt, now int64) int32 {
	secs := int64(0)
	if d := expiresAt - now; d > 0 {
		secs = (d + 999_999) / 1_000_000
	}
	secs += s.skewSec + 1
	if secs <= maxRelativeTTL {
		return int32(secs)
	}
	abs := time.Now().Unix() + secs
	if abs > math.MaxInt32 {
		abs = math.MaxInt32
	}
	return int32(abs)
}

// backoff waits before compare-and-swap attempt n+1 (full jitter).
func (s *Store) backoff(ctx context.Context, n int) error {
	ceil := s.cfg.backoffMax
	if n < 30 {
		ceil = min(ceil, s.cfg.backoffMin<<n)
	}
	if ceil <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(rand.N(ceil) + 1)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// shapes remembers the window limits (fixed and sliding) the store has
// used, so that Reset and Inspect can find a key's counters, whose names
// depend on the limit.
type shapes struct {
	seen sync.Map // shapeKey → struct{}
	mu   sync.Mutex
	all  []*algo.Limit
}

type shapeKey struct {
	kind     algo.Kind
	period   time.Duration
	calendar algo.Calendar
	sub      int
}

// maxShapes bounds the registry; limits are per rule, not per key.
const maxShapes = 256

func (sh *shapes) remember(l *algo.Limit) {
	p := l.Params()
	k := shapeKey{p.Algorithm, p.Period, p.Calendar, p.SubWindows}
	if _, ok := sh.seen.Load(k); ok {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.seen.Load(k); ok || len(sh.all) >= maxShapes {
		return
	}
	sh.all = append(sh.all, l)
	sh.seen.Store(k, struct{}{})
}

func (sh *shapes) list() []*algo.Limit {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return append([]*algo.Limit(nil), sh.all...)
}
