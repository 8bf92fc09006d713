package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/internal/limitcache"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
)

// Defaults of the options.
const (
	// DefaultTimeout bounds the borrowing of one Take from the peer
	// regions, all of them together.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultBackoff is how long a peer that failed is left out.
	DefaultBackoff = 5 * time.Second
	// MaxWeight bounds a region's weight.
	MaxWeight = 1_000_000
)

// ErrInvalidOption is wrapped by New's errors for a region list or an
// option that cannot be used.
var ErrInvalidOption = errors.New("region: invalid option")

// Peer is another region: its name, as every region calls it, and its
// store, which this region borrows from.
type Peer struct {
	Name  string
	Store store.Store
}

// Option configures New.
type Option func(*config)

type config struct {
	weights  map[string]int
	slice    int64
	prefetch bool
	ttl      time.Duration
	timeout  time.Duration
	backoff  time.Duration
	clock    func() time.Time
	log      *slog.Logger
}

// WithWeights sets the regions' weights, by name (default 1 each): a
// region's share of a limit is in proportion to its weight. Every region
// must be given the same weights, so that the shares add up to the limit.
func WithWeights(w map[string]int) Option { return func(c *config) { c.weights = w } }

// WithSlice borrows slices of n units from a peer region at a time
// (store/lease) instead of each request's own cost (the default, 0): one
// cross-region call per n borrowed units instead of one per request, at
// the price of the worst-case overshoot the package documentation bounds.
// n must be 0 or at least 2; keep it well below the smallest share a peer
// has of the limits borrowed (PeerShares): the units of a slice are the
// lender's, which refuses its own requests while they are held here, until
// they are used or go back when the slice's TTL ends (the lender's own
// traffic may be refused up to a slice's worth of units it would have
// admitted); a slice larger than the peer's share takes all of it, in two
// calls (store/lease sizes a slice by the whole limit).
func WithSlice(n int64) Option { return func(c *config) { c.slice = n } }

// WithPrefetch borrows ahead, in the background: when a decision on this
// region's share leaves fewer units than a slice, and when a borrowed
// slice's last unit is lent, a goroutine takes a slice from a peer, so
// that the Takes the share refuses next are admitted from it in process,
// without waiting on another region. It needs WithSlice; the overshoot
// bound is the slices'. A slice borrowed ahead and not needed goes back
// when its TTL ends: a key that hovers near its share costs up to two
// cross-region calls a TTL. The sliding log, which store/lease does not
// slice, is not borrowed ahead.
func WithPrefetch() Option { return func(c *config) { c.prefetch = true } }

// WithSliceTTL sets how long a borrowed slice is used before its unused
// units go back to the peer (default lease.DefaultTTL).
func WithSliceTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithTimeout bounds the borrowing of one Take from the peers, all of
// them together (default DefaultTimeout). A peer that does not answer in
// time is left out for the backoff.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithBackoff sets how long a peer that failed is left out (default
// DefaultBackoff): then the next borrowing tries it again. A peer left out
// is also probed in the background (its store's Ping, else a Peek that
// charges nothing) every second, or every backoff when that is shorter,
// and lends again as soon as a probe answers.
func WithBackoff(d time.Duration) Option { return func(c *config) { c.backoff = d } }

// WithClock replaces the clock that times the backoff, how long a
// refusal of this region's share is remembered, and the borrowed slices'
// TTL (tests).
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithLogger logs a WARN when a peer is left out, and an INFO when it is
// tried again and answers (default: no log).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// Stats counts what a Store did since New.
type Stats struct {
	// Borrowed is the number of Takes a peer admitted after this
	// region's share refused.
	Borrowed int64
	// PeerFailures is the number of peer calls that failed (an error or
	// the timeout), each of which left the peer out for the backoff.
	PeerFailures int64
	// Prefetches is the number of rounds of borrowing ahead
	// (WithPrefetch) that left a slice held here (a round on a key that
	// holds one already makes no call), and Prefetching how many are in
	// flight now.
	Prefetches  int64
	Prefetching int
	// Peers are the peer regions, by name, each with whether it is left
	// out now.
	Peers []PeerStats
}

// PeerStats is a peer region's state.
type PeerStats struct {
	Name string
	// Down reports that the peer's last call failed and none has
	// answered since (a borrowing after the backoff, or a probe).
	Down bool
}

// Store is a store.Store for one region; see the package documentation.
// It is safe for concurrent use.
type Store struct {
	names   []string // every region, sorted
	weights []int64  // by index into names
	total   int64
	self    int

	local   store.Store
	peers   []*peer
	timeout time.Duration
	backoff time.Duration
	clock   func() time.Time
	log     *slog.Logger

	seed                           maphash.Seed
	borrowed, failures, prefetched atomic.Int64

	// Borrowing ahead (WithPrefetch): slice is the slices' size; fetching
	// holds the keys with a prefetch in flight, at most maxPrefetches at
	// once; life ends them at Close, which waits for them.
	slice    int64
	prefetch bool
	fetching sync.Map
	fetchers chan struct{}
	life     context.Context
	endLife  context.CancelFunc
	fetchWG  sync.WaitGroup
	// fetchMu orders borrowAhead's fetchWG.Add before Close's Wait:
	// closed is set under it, and no prefetch starts after.
	fetchMu sync.Mutex
	closed  bool

	splits limitcache.Cache[*split]
	spent  spentMemo
	loans  loanBook
	// shut is set by Close: every call after it is store.ErrClosed.
	shut atomic.Bool
}

type peer struct {
	name string
	// borrow takes from the peer's store at the peer's share: a
	// shareStore, under a lease.Store when slices are on.
	borrow store.Store
	// down is the clock's UnixNano until which the peer is left out.
	down atomic.Int64
	// store is the peer's store as given, which probe pings; failed is
	// set by a failure and cleared by the next answer; probing is set
	// while a probe goroutine runs.
	store           store.Store
	failed, probing atomic.Bool
}

// split is a limit divided among the regions: limits[i] is region i's
// share, nil for a share of nothing.
type split struct {
	limits []*algo.Limit
	borrow bool
}

// New returns the store of region self, which enforces each limit on its
// share in local (its own region's store) and borrows from peers when its
// share refuses. The Store owns local and the peers' stores: Close closes
// them, and so does New when it returns an error.
func New(self string, local store.Store, peers []Peer, opts ...Option) (*Store, error) {
	s, err := newStore(self, local, peers, opts)
	if err != nil {
		if local != nil {
			_ = local.Close()
		}
		for _, p := range peers {
			if p.Store != nil {
				_ = p.Store.Close()
			}
		}
		return nil, err
	}
	return s, nil
}

func newStore(self string, local store.Store, peers []Peer, opts []Option) (*Store, error) {
	c := config{ttl: lease.DefaultTTL, timeout: DefaultTimeout, backoff: DefaultBackoff, clock: time.Now}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, a...))
	}
	switch {
	case self == "":
		return nil, bad("this region has no name")
	case local == nil:
		return nil, bad("region %q: nil store", self)
	case c.slice < 0 || c.slice == 1:
		return nil, bad("slice %d: must be 0 (borrow each request's cost) or at least 2", c.slice)
	case c.prefetch && c.slice < 2:
		return nil, bad("prefetch needs slices (WithSlice of at least 2) to borrow into")
	case c.ttl <= 0:
		return nil, bad("slice TTL %v: must be positive", c.ttl)
	case c.timeout <= 0:
		return nil, bad("timeout %v: must be positive", c.timeout)
	case c.backoff <= 0:
		return nil, bad("backoff %v: must be positive", c.backoff)
	case c.clock == nil:
		return nil, bad("nil clock")
	}
	names := []string{self}
	for _, p := range peers {
		switch {
		case p.Name == "":
			return nil, bad("a peer region has no name")
		case slices.Contains(names, p.Name):
			return nil, bad("region %q is named twice", p.Name)
		case p.Store == nil:
			return nil, bad("peer region %q: nil store", p.Name)
		}
		names = append(names, p.Name)
	}
	for name, w := range c.weights {
		if !slices.Contains(names, name) {
			return nil, bad("weight for region %q, which is neither this region (%q) nor a peer (regions: %v)", name, self, sorted(names))
		}
		if w < 1 || w > MaxWeight {
			return nil, bad("region %q: weight %d: must be between 1 and %d", name, w, MaxWeight)
		}
	}
	slices.Sort(names)
	s := &Store{
		names: names, weights: make([]int64, len(names)),
		self:  slices.Index(names, self),
		local: local, timeout: c.timeout, backoff: c.backoff, clock: c.clock, log: c.log,
		slice: c.slice, prefetch: c.prefetch, fetchers: make(chan struct{}, maxPrefetches), seed: maphash.MakeSeed(),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.loans.seed = s.seed
	for i, n := range names {
		s.weights[i] = 1
		if w, ok := c.weights[n]; ok {
			s.weights[i] = int64(w)
		}
		s.total += s.weights[i]
	}
	for _, p := range peers {
		sh := &shareStore{s: s, idx: slices.Index(names, p.Name), inner: p.Store}
		var b store.Store = sh
		if c.slice >= 2 {
			ls, err := lease.New(b, lease.WithSlice(c.slice), lease.WithTTL(c.ttl), lease.WithClock(c.clock))
			if err != nil {
				return nil, fmt.Errorf("region %q: %w", p.Name, err)
			}
			b = ls
		}
		s.peers = append(s.peers, &peer{name: p.Name, borrow: b, store: p.Store})
	}
	return s, nil
}

func sorted(names []string) []string {
	s := slices.Clone(names)
	slices.Sort(s)
	return s
}

// Share returns this region's share of l: nil when it is nothing (a limit
// smaller than the number of regions, weighed).
func (s *Store) Share(l *algo.Limit) *algo.Limit { return s.split(l).limits[s.self] }

// PeerShares returns the share of l of each peer region, by name (nil for
// a share of nothing), and whether this region borrows from them for l:
// false for the algorithms it does not borrow (concurrency, the shaper,
// smooth).
func (s *Store) PeerShares(l *algo.Limit) (map[string]*algo.Limit, bool) {
	sp := s.split(l)
	out := make(map[string]*algo.Limit, len(s.peers))
	for _, p := range s.peers {
		out[p.name] = sp.limits[slices.Index(s.names, p.name)]
	}
	return out, sp.borrow
}

// Unreached notes that peer has not been reached yet (its store is being
// opened in the background): it reads Down, and is probed, until a call
// answers. Borrowing still tries it meanwhile. It returns false for a name
// that is no peer's.
func (s *Store) Unreached(peer string) bool {
	for _, p := range s.peers {
		if p.name == peer {
			p.failed.Store(true)
			s.probe(p)
			return true
		}
	}
	return false
}

// Stats returns what the Store did since New.
func (s *Store) Stats() Stats {
	st := Stats{Borrowed: s.borrowed.Load(), PeerFailures: s.failures.Load(), Prefetches: s.prefetched.Load(),
		Prefetching: len(s.fetchers),
		Peers:       make([]PeerStats, len(s.peers))}
	for i, p := range s.peers {
		st.Peers[i] = PeerStats{Name: p.name, Down: p.failed.Load()}
	}
	return st
}

// Regions returns every region's name and weight, in the order the
// shares are computed, and a fingerprint of them: regions that compute
// their shares alike have the same fingerprint (see the package
// documentation on weights).
func (s *Store) Regions() (names []string, weights []int64, fingerprint string) {
	h := fnv.New64a()
	for i, n := range s.names {
		fmt.Fprintf(h, "%s=%d;", n, s.weights[i])
	}
	return slices.Clone(s.names), slices.Clone(s.weights), fmt.Sprintf("%016x", h.Sum64())
}

// Self returns this region's name.
func (s *Store) Self() string { return s.names[s.self] }

// Unwrap returns this region's own store.
func (s *Store) Unwrap() store.Store { return s.local }

func (s *Store) split(l *algo.Limit) *split {
	if sp, ok := s.splits.Get(l); ok {
		return sp
	}
	return s.splits.Put(l, s.divide(l))
}

// borrowable reports the algorithms whose units a region borrows from its
// peers: those whose admission is a count of units, with no delay and no
// slot to give back.
func borrowable(k algo.Kind) bool {
	switch k {
	case algo.FixedWindow, algo.SlidingWindow, algo.SlidingLog, algo.TokenBucket, algo.GCRA:
		return true
	}
	return false
}

// divide splits l among the regions by weight; see the package
// documentation for which parameters are divided.
func (s *Store) divide(l *algo.Limit) *split {
	p := l.Params()
	sp := &split{limits: make([]*algo.Limit, len(s.names)), borrow: borrowable(p.Algorithm)}
	part := func(v int64) []int64 { return apportion(v, s.weights, s.total) }
	limit := part(p.Limit)
	var burst, initial, delay []int64
	switch p.Algorithm {
	case algo.TokenBucket, algo.GCRA:
		burst = part(p.Burst)
		if p.InitialTokens != nil {
			initial = part(*p.InitialTokens)
		}
	case algo.Shaper:
		burst = part(p.Burst)
		delay = part(p.Delay)
	}
	for i := range s.names {
		q := p
		q.Limit = limit[i]
		if q.Limit == 0 {
			continue
		}
		if burst != nil {
			q.Burst = burst[i]
			if p.Burst > 0 && q.Burst == 0 && p.Algorithm != algo.Shaper {
				continue // no capacity here; 0 would mean the default, Limit
			}
		}
		if initial != nil {
			// Apportioned apart, a part of the initial tokens may pass
			// the burst's by a unit.
			it := min(initial[i], q.Limit)
			if q.Burst > 0 {
				it = min(initial[i], q.Burst)
			}
			q.InitialTokens = &it
		}
		if delay != nil {
			q.Delay = min(delay[i], q.Burst)
		}
		if c, err := algo.Compile(q); err == nil {
			sp.limits[i] = c
		}
	}
	return sp
}

// apportion divides v among weights w (of sum total) by the largest
// remainder: each gets ⌊v·w/total⌋, and the units left go one each to the
// largest remainders, ties to the lower index, so the parts add up to v
// exactly and every region computes the same parts.
func apportion(v int64, w []int64, total int64) []int64 {
	out := make([]int64, len(w))
	if v <= 0 {
		return out
	}
	rem := make([]uint64, len(w))
	left := v
	for i, wi := range w {
		hi, lo := bits.Mul64(uint64(v), uint64(wi))
		q, r := bits.Div64(hi, lo, uint64(total))
		out[i], rem[i] = int64(q), r
		left -= int64(q)
	}
	order := make([]int, len(w))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rem[b], rem[a]) })
	for _, i := range order[:left] {
		out[i]++
	}
	return out
}

// shares returns reqs with each limit replaced by this region's share,
// and whether every request has one and can borrow.
func (s *Store) shares(reqs []store.Request) (out []store.Request, all, borrow bool) {
	out = make([]store.Request, len(reqs))
	all, borrow = true, len(s.peers) > 0
	for i, r := range reqs { // each with a limit: checked by the callers
		sp := s.split(r.Limit)
		r.Limit = sp.limits[s.self]
		all = all && r.Limit != nil
		borrow = borrow && sp.borrow
		out[i] = r
	}
	return out, all, borrow
}

// never fills out with refusals that no wait turns into an admission here:
// this region's share of a request is nothing.
func never(out []algo.Decision) {
	for i := range out {
		out[i] = algo.Decision{Limit: -1, RetryAfter: algo.Never} // whole sets Limit
	}
}

// Take decides reqs on this region's share; when the share refuses, it
// borrows from the peers (see the package documentation).
func (s *Store) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := s.isShut(); err != nil {
		return store.Result{}, err
	}
	if err := check(reqs, out); err != nil {
		return store.Result{}, err
	}
	res, err := s.take(ctx, reqs, out)
	whole(reqs, out)
	return res, err
}

// isShut returns store.ErrClosed once Close was called.
func (s *Store) isShut() error {
	if s.shut.Load() {
		return fmt.Errorf("region: %w", store.ErrClosed)
	}
	return nil
}

// check is store.Check with out required: every decision has its slot.
func check(reqs []store.Request, out []algo.Decision) error {
	if len(out) != len(reqs) {
		return errors.Join(store.ErrBadRequest, fmt.Errorf("region: %d decisions for %d requests", len(out), len(reqs)))
	}
	return store.Check(reqs, out)
}

// whole reports each decision against its whole limit rather than the
// share that decided it: Limit is the limit's capacity, as configured;
// Remaining stays what the deciding share had left (see the package
// documentation).
func whole(reqs []store.Request, out []algo.Decision) {
	for i := range reqs {
		if out[i].Limit != 0 {
			out[i].Limit = reqs[i].Limit.Capacity()
		}
	}
}

func (s *Store) take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	lr, all, borrow := s.shares(reqs)
	var res store.Result
	switch {
	case all && borrow && len(reqs) == 1 && s.spent.refused(reqs[0], s.clock(), &out[0]):
		// This region's share refused the key a moment ago: borrow at
		// once, and answer that refusal if no peer lends.
	case all:
		var err error
		gen := s.spent.gen.Load()
		res, err = s.local.Take(ctx, lr, out)
		if res.Allowed && borrow && len(reqs) == 1 && s.ahead(reqs[0].Limit) && out[0].Remaining < s.slice {
			s.borrowAhead(reqs[0], nil)
		}
		if err != nil || res.Allowed || !borrow {
			return res, err
		}
		if len(reqs) == 1 {
			s.spent.remember(reqs[0], out[0], s.clock(), gen)
		}
	default:
		never(out)
		if !borrow {
			return store.Result{}, nil
		}
	}
	if b, ok := s.borrow(ctx, reqs, out); ok {
		return b, nil
	}
	return res, nil
}

// budget returns how long borrowing may take under ctx: the timeout, but
// ending a tenth of the time left (5ms at least) before the caller's
// deadline. A borrowing cut short answers this region's refusal; one the
// caller's deadline cut would be answered by the caller's failure policy
// (store/resilient: open admits).
func (s *Store) budget(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return s.timeout
	}
	left := time.Until(d)
	return min(s.timeout, left-max(left/10, 5*time.Millisecond))
}

// borrow tries the peers in turn, from the key's first (see first),
// until one admits reqs, within the timeout, and reports whether one did.
// A refusal that says sooner than out's when a retry may pass replaces it
// in out. A peer's failure leaves the peer out and tries the next; a
// peer's refusal of the request itself (peerRefusal) tries the next.
func (s *Store) borrow(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, bool) {
	if ctx.Err() != nil || len(reqs) == 0 {
		return store.Result{}, false
	}
	if res, ok := s.borrowLocal(reqs, out, s.clock()); ok {
		return res, true
	}
	budget := s.budget(ctx)
	if budget <= 0 {
		return store.Result{}, false
	}
	// Cut well short by the caller's deadline, a borrowing that runs out
	// is the caller's haste, not the peer's failure. Cut by a little (the
	// deadline of a failure policy above, which allows this region's store
	// its own time first), a peer that has not answered in over half the
	// timeout is failing: not leaving it out would make every borrowing
	// wait for it.
	trimmed := budget < s.timeout/2
	bctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	pout := make([]algo.Decision, len(reqs))
	start := s.first(reqs[0].Key)
	for k := range s.peers {
		p := s.peers[(start+k)%len(s.peers)]
		res, asked, err := s.ask(bctx, p, reqs, pout)
		if !asked {
			continue
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return store.Result{}, false // the caller gave up, not the peer
			case trimmed && bctx.Err() != nil:
				return store.Result{}, false // the caller's deadline, near
			case peerRefusal(err):
				continue // this peer cannot take this request; another may
			}
			s.leaveOut(p, err)
			if bctx.Err() != nil {
				return store.Result{}, false // the timeout is spent
			}
			continue
		}
		if res.Allowed {
			copy(out, pout)
			s.borrowed.Add(1)
			s.loans.lent(reqs, res.At, p)
			if len(reqs) == 1 {
				s.refill(reqs[0], p)
			}
			return res, true
		}
		if wait(pout) < wait(out) {
			copy(out, pout)
		}
	}
	return store.Result{}, false
}

// ask decides reqs on p's borrowing store and reports whether it asked:
// not while p is left out. An answer of a failure policy for the peer's
// store (a peer wrapped in store/resilient), which charged nothing there
// and lends nothing, is errPeerFallback. A peer that answers is no longer
// left out.
func (s *Store) ask(ctx context.Context, p *peer, reqs []store.Request, out []algo.Decision) (store.Result, bool, error) {
	down := p.down.Load()
	if down > s.clock().UnixNano() {
		return store.Result{}, false, nil
	}
	res, err := p.borrow.Take(ctx, reqs, out)
	if err == nil && res.Fallback {
		err = errPeerFallback
	}
	if err == nil {
		s.answered(p, down)
	}
	return res, true, err
}

// errPeerFallback is a peer's answer from a failure policy, which lends
// nothing.
var errPeerFallback = errors.New("region: a failure policy answered for the peer's store")

// peerRefusal reports a peer's error that is about the request on that
// peer, not the peer's health: a request its store cannot take (the
// caller's own mistakes are refused before any call) and contention on
// one hot key. The peer is not left out for it.
func peerRefusal(err error) bool {
	return errors.Is(err, store.ErrBadRequest) || errors.Is(err, store.ErrContention)
}

// first returns the index of the peer to try first for key: the same for
// a key at every call, so that its borrowed slices come from one peer
// while it lends, and the keys spread over the peers.
func (s *Store) first(key string) int {
	if len(s.peers) == 0 {
		return 0
	}
	return int(maphash.String(s.seed, key) % uint64(len(s.peers)))
}

// leaveOut notes that p failed: it is left out for the backoff, and
// probed meanwhile.
func (s *Store) leaveOut(p *peer, err error) {
	s.failures.Add(1)
	p.down.Store(s.clock().Add(s.backoff).UnixNano())
	p.failed.Store(true)
	s.probe(p)
	if s.log != nil {
		// Quoted parts blanked: the stores quote the key, which holds a
		// client's values.
		s.log.Warn("region: peer left out; this region limits on its share without it meanwhile",
			"peer", p.name, "for", s.backoff, "err", store.BlankQuoted(err.Error()))
	}
}

// answered notes that p, which was left out until down (0: it was not),
// answered.
func (s *Store) answered(p *peer, down int64) {
	if down != 0 && p.down.CompareAndSwap(down, 0) {
		s.back(p)
	}
}

// back notes that p, which failed, answers again.
func (s *Store) back(p *peer) {
	if p.failed.CompareAndSwap(true, false) && s.log != nil {
		s.log.Info("region: peer answers again", "peer", p.name)
	}
}

// probeEvery is how often a peer left out is probed, at most.
const probeEvery = time.Second

// probe starts, unless one runs or the Store is closed, a goroutine that
// pings p every probeEvery (or backoff, when shorter) while p is left
// out, and lets it lend again once it answers.
func (s *Store) probe(p *peer) {
	if !p.probing.CompareAndSwap(false, true) {
		return
	}
	s.fetchMu.Lock()
	if s.closed {
		s.fetchMu.Unlock()
		p.probing.Store(false)
		return
	}
	s.fetchWG.Add(1)
	s.fetchMu.Unlock()
	go func() {
		defer func() {
			p.probing.Store(false)
			// A failure noted while this one was ending found it running.
			if p.failed.Load() && s.life.Err() == nil {
				s.probe(p)
			}
			s.fetchWG.Done()
		}()
		t := time.NewTicker(min(probeEvery, s.backoff))
		defer t.Stop()
		for p.failed.Load() {
			select {
			case <-s.life.Done():
				return
			case <-t.C:
			}
			// As answered: a failure after the ping was sent, with a
			// backoff of its own, stands.
			down := p.down.Load()
			ctx, cancel := context.WithTimeout(s.life, s.timeout)
			err := ping(ctx, p.store)
			cancel()
			if err == nil && p.down.CompareAndSwap(down, 0) {
				s.back(p)
			}
		}
	}()
}

// refill borrows ahead (WithPrefetch) after p lent r from a slice: when
// the slice held here is used up, a fresh one is borrowed in the
// background, before the next Take that would wait for it. (Not sooner:
// the lease.Store holds the key across the call that takes a slice, so
// that a refill while units are left would hold up the Takes that could
// use them.)
func (s *Store) refill(r store.Request, p *peer) {
	if !s.ahead(r.Limit) {
		return
	}
	h, ok := p.borrow.(interface {
		Held(key string, l *algo.Limit) int64
	})
	if !ok {
		return
	}
	if h.Held(r.Key, r.Limit) == 0 {
		s.borrowAhead(r, p)
	}
}

// ahead reports whether l's slices are borrowed ahead: with WithPrefetch,
// but not the sliding log, which store/lease does not slice.
func (s *Store) ahead(l *algo.Limit) bool {
	return s.prefetch && l.Algorithm() != algo.SlidingLog
}

// maxPrefetches bounds the slices borrowed ahead at once.
const maxPrefetches = 64

// borrowAhead starts a goroutine that borrows a slice of r's key from a
// peer (WithPrefetch), unless one is in flight for the key or
// maxPrefetches are. The slice is taken by a Take of one unit through the
// peer's lease.Store, which takes the slice and admits the unit from it,
// then a Refund of that unit, which puts it back into the slice: the
// whole slice is then held here, for the Takes this region's share will
// refuse. When the key holds a slice with units already, both are
// answered in process. The peer from is tried first (nil: the key's
// first, see first).
func (s *Store) borrowAhead(r store.Request, from *peer) {
	if _, busy := s.fetching.LoadOrStore(r.Key, struct{}{}); busy {
		return
	}
	select {
	case s.fetchers <- struct{}{}:
	default:
		s.fetching.Delete(r.Key)
		return
	}
	s.fetchMu.Lock()
	if s.closed {
		s.fetchMu.Unlock()
		<-s.fetchers
		s.fetching.Delete(r.Key)
		return
	}
	s.fetchWG.Add(1)
	s.fetchMu.Unlock()
	go func() {
		defer func() {
			<-s.fetchers
			s.fetching.Delete(r.Key)
			s.fetchWG.Done()
		}()
		ctx, cancel := context.WithTimeout(s.life, s.timeout)
		defer cancel()
		one := []store.Request{{Key: r.Key, Limit: r.Limit, Cost: 1}}
		var d [1]algo.Decision
		start := s.first(r.Key)
		if from != nil {
			start = slices.Index(s.peers, from)
		}
		for k := range s.peers {
			p := s.peers[(start+k)%len(s.peers)]
			res, asked, err := s.ask(ctx, p, one, d[:])
			if !asked {
				continue
			}
			if err != nil {
				if s.life.Err() != nil {
					return
				}
				if peerRefusal(err) {
					continue
				}
				s.leaveOut(p, err)
				if ctx.Err() != nil {
					return
				}
				continue
			}
			if res.Allowed {
				one[0].At = res.At
				// A refund cut short loses the unit until its window
				// passes: fewer admitted, never more.
				_ = p.borrow.Refund(ctx, one)
				s.prefetched.Add(1)
				return
			}
		}
	}()
}

// borrowLocal admits reqs from a slice borrowed from a peer that is up
// (WithSlice: store/lease's TakeLocal), with no call and no timer.
// Only single requests are leased; out is written only by an admission.
func (s *Store) borrowLocal(reqs []store.Request, out []algo.Decision, now time.Time) (store.Result, bool) {
	if len(reqs) != 1 {
		return store.Result{}, false
	}
	var d [1]algo.Decision
	for _, p := range s.peers {
		lt, ok := p.borrow.(store.LocalTaker)
		if !ok || p.down.Load() > now.UnixNano() {
			continue
		}
		if res, ok := lt.TakeLocal(reqs, d[:]); ok && res.Allowed {
			out[0] = d[0]
			s.borrowed.Add(1)
			s.loans.lent(reqs, res.At, p)
			s.refill(reqs[0], p)
			return res, true
		}
	}
	return store.Result{}, false
}

// wait is how long the longest RetryAfter of a refusal is.
func wait(out []algo.Decision) time.Duration {
	var w time.Duration
	for _, d := range out {
		w = max(w, d.RetryAfter)
	}
	return w
}

// TakeLocal decides reqs at once when it can: from this region's own
// store when it is a store.LocalTaker that admits them, or, for a key
// whose share here refused a moment ago, from a slice borrowed from a
// peer (WithSlice). Anything else, a refusal included, is left to Take.
func (s *Store) TakeLocal(reqs []store.Request, out []algo.Decision) (store.Result, bool) {
	if s.shut.Load() || check(reqs, out) != nil {
		return store.Result{}, false // Take says what is wrong
	}
	res, ok := s.takeLocal(reqs, out)
	if ok {
		whole(reqs, out)
	}
	return res, ok
}

func (s *Store) takeLocal(reqs []store.Request, out []algo.Decision) (store.Result, bool) {
	lr, all, borrow := s.shares(reqs)
	if !all {
		return store.Result{}, false
	}
	if borrow && len(reqs) == 1 {
		var d algo.Decision
		if now := s.clock(); s.spent.refused(reqs[0], now, &d) {
			return s.borrowLocal(reqs, out, now)
		}
	}
	lt, ok := s.local.(store.LocalTaker)
	if !ok {
		return store.Result{}, false
	}
	res, ok := lt.TakeLocal(lr, out)
	if !ok || (!res.Allowed && borrow) {
		return store.Result{}, false
	}
	// As Take does: a decision on the share that leaves it less than a
	// slice borrows the next one ahead.
	if res.Allowed && borrow && len(reqs) == 1 && s.ahead(reqs[0].Limit) && out[0].Remaining < s.slice {
		s.borrowAhead(reqs[0], nil)
	}
	return res, true
}

// Peek reports what Take would answer for each request on its own: this
// region's share's decision, or, when the share would refuse, the first
// peer's that would admit it (borrowable algorithms; within the
// timeout, as Take borrows).
func (s *Store) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := s.isShut(); err != nil {
		return err
	}
	if err := check(reqs, out); err != nil {
		return err
	}
	err := s.peek(ctx, reqs, out)
	whole(reqs, out)
	return err
}

func (s *Store) peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	lr, all, _ := s.shares(reqs)
	if all {
		if err := s.local.Peek(ctx, lr, out); err != nil {
			return err
		}
	} else {
		for i := range lr {
			if lr[i].Limit == nil {
				never(out[i : i+1])
				continue
			}
			if err := s.local.Peek(ctx, lr[i:i+1], out[i:i+1]); err != nil {
				return err
			}
		}
	}
	var d [1]algo.Decision
	var pctx context.Context // the peers', one budget for every request
	for i, r := range reqs {
		if out[i].Allowed || !s.split(r.Limit).borrow {
			continue
		}
		if pctx == nil {
			budget := s.budget(ctx)
			if budget <= 0 {
				return nil
			}
			var cancel context.CancelFunc
			pctx, cancel = context.WithTimeout(ctx, budget)
			defer cancel()
		}
		if pctx.Err() != nil {
			break
		}
		if s.peekPeers(pctx, reqs[i:i+1], d[:]) {
			out[i] = d[0]
		}
	}
	return nil
}

// peekPeers reports whether a peer that is up would admit reqs, with its
// decision in out, asking them under pctx (peek's budget). A peer that
// fails is left to Take to find.
func (s *Store) peekPeers(pctx context.Context, reqs []store.Request, out []algo.Decision) bool {
	if len(s.peers) == 0 {
		return false
	}
	now := s.clock().UnixNano()
	start := s.first(reqs[0].Key)
	for k := range s.peers {
		p := s.peers[(start+k)%len(s.peers)]
		if p.down.Load() > now {
			continue
		}
		// The borrowing store: a lease.Store's Peek counts the units of
		// a slice held here.
		if err := p.borrow.Peek(pctx, reqs, out); err == nil && out[0].Allowed {
			return true
		}
		if pctx.Err() != nil {
			return false
		}
	}
	return false
}

// withShare returns the requests of reqs that have a share here, with it.
func (s *Store) withShare(reqs []store.Request) []store.Request {
	lr, _, _ := s.shares(reqs)
	return slices.DeleteFunc(lr, func(r store.Request) bool { return r.Limit == nil })
}

// Refund gives the units back to this region's own store, wherever they
// were charged (see the package documentation).
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	if err := s.isShut(); err != nil {
		return err
	}
	if err := store.Check(reqs, nil); err != nil {
		return err
	}
	var own []store.Request
	var lent map[*peer][]store.Request
	for _, r := range reqs {
		s.spent.forget(r.Key)
		if p := s.loans.repaid(r.Key, r.At); p != nil {
			if lent == nil {
				lent = make(map[*peer][]store.Request)
			}
			lent[p] = append(lent[p], r)
			continue
		}
		own = append(own, r)
	}
	var err error
	if len(own) > 0 {
		err = s.local.Refund(ctx, s.withShare(own))
	}
	if len(lent) > 0 {
		s.repay(ctx, lent)
	}
	// Again, now that the units are back: a Take that read the share's
	// refusal between the first forget and the refund must not be
	// remembered past it.
	for _, r := range reqs {
		s.spent.forget(r.Key)
	}
	return err
}

// repay gives borrowed admissions back to the peers that lent them, at
// their shares (or into the slice held here), within the borrowing's
// budget. A lender that is left out, fails or is late keeps the units
// charged until its window passes or it refills — fewer admitted, never
// more — and is not this region's failure: repay returns nothing, so that
// a failure policy above never answers for this region because a peer is
// down. A lender that fails is left out, as a borrowing's would be.
func (s *Store) repay(ctx context.Context, lent map[*peer][]store.Request) {
	budget := s.budget(ctx)
	if budget <= 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	for p, rs := range lent {
		if p.down.Load() > s.clock().UnixNano() {
			continue
		}
		err := p.borrow.Refund(rctx, rs)
		switch {
		case err == nil, ctx.Err() != nil, peerRefusal(err):
		default:
			s.leaveOut(p, err)
		}
	}
}

// Release gives back Concurrency leases, which are only ever held in this
// region's own store.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	if err := store.Check(reqs, nil); err != nil {
		return err
	}
	return s.local.Release(ctx, s.withShare(reqs))
}

// Renew renews Concurrency leases in this region's own store.
func (s *Store) Renew(ctx context.Context, reqs []store.Request) error {
	if err := store.Check(reqs, nil); err != nil {
		return err
	}
	r, ok := s.local.(store.Renewer)
	if !ok {
		return nil
	}
	return r.Renew(ctx, s.withShare(reqs))
}

// Reset forgets the keys in every region: this one's store and each
// peer's. A peer that fails is named in the error; the others are reset
// all the same.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	if err := s.isShut(); err != nil {
		return err
	}
	for _, k := range keys {
		s.spent.forget(k)
	}
	errs := []error{s.local.Reset(ctx, keys...)}
	for _, p := range s.peers {
		if err := p.borrow.Reset(ctx, keys...); err != nil {
			errs = append(errs, fmt.Errorf("region %q: %w", p.name, err))
		}
	}
	for _, k := range keys {
		s.spent.forget(k) // again: see Refund
	}
	return errors.Join(errs...)
}

// Close closes this region's store and the peers'.
func (s *Store) Close() error {
	s.shut.Store(true)
	s.fetchMu.Lock()
	s.closed = true
	s.fetchMu.Unlock()
	s.endLife()
	s.fetchWG.Wait()
	errs := []error{s.local.Close()}
	for _, p := range s.peers {
		if err := p.borrow.Close(); err != nil {
			errs = append(errs, fmt.Errorf("region %q: %w", p.name, err))
		}
	}
	return errors.Join(errs...)
}

// pingLimit is the limit of Ping's probe Peek.
var pingLimit, _ = algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})

// Ping checks this region's own store: its Ping, or a Peek of a probe key
// that charges nothing. A peer down is not this region's failure: the
// region limits on its share meanwhile.
func (s *Store) Ping(ctx context.Context) error { return ping(ctx, s.local) }

// ping checks st: its Ping, or a Peek of a probe key that charges nothing.
func ping(ctx context.Context, st store.Store) error {
	if p, ok := st.(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return st.Peek(ctx, []store.Request{{Key: "fg:__ping", Limit: pingLimit}}, make([]algo.Decision, 1))
}

// shareStore is a peer region's store as this region borrows from it: each
// limit is replaced by the peer's share.
type shareStore struct {
	s     *Store
	idx   int
	inner store.Store
}

// rewrite returns reqs at the peer's shares, and false when a request has
// none there.
func (p *shareStore) rewrite(reqs []store.Request) ([]store.Request, bool) {
	out := make([]store.Request, len(reqs))
	for i, r := range reqs {
		if r.Limit != nil {
			r.Limit = p.s.split(r.Limit).limits[p.idx]
			if r.Limit == nil {
				return nil, false
			}
		}
		out[i] = r
	}
	return out, true
}

func (p *shareStore) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	pr, ok := p.rewrite(reqs)
	if !ok {
		never(out)
		return store.Result{}, nil
	}
	return p.inner.Take(ctx, pr, out)
}

func (p *shareStore) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	pr, ok := p.rewrite(reqs)
	if !ok {
		never(out)
		return nil
	}
	return p.inner.Peek(ctx, pr, out)
}

func (p *shareStore) Refund(ctx context.Context, reqs []store.Request) error {
	if pr, ok := p.rewrite(reqs); ok {
		return p.inner.Refund(ctx, pr)
	}
	return nil
}

func (p *shareStore) Release(ctx context.Context, reqs []store.Request) error {
	if pr, ok := p.rewrite(reqs); ok {
		return p.inner.Release(ctx, pr)
	}
	return nil
}

func (p *shareStore) Reset(ctx context.Context, keys ...string) error {
	return p.inner.Reset(ctx, keys...)
}

func (p *shareStore) Close() error { return p.inner.Close() }

// spentFor bounds how long a refusal of this region's share is trusted
// without asking its store again: a unit refunded or given back there, or
// the key reset through another instance, is found within it.
const spentFor = time.Second

// maxSpent bounds the keys spentMemo remembers; past it, it forgets them
// all and starts again.
const maxSpent = 1 << 16

// spentMemo remembers the keys whose share in this region's store refused
// a single-request Take, until that refusal's RetryAfter (spentFor at
// most): the next Takes of as much or more on the key go to the peers at
// once, with one store call (none from a borrowed slice) instead of two.
// It only ever sends a Take to borrow that this region's store would have
// refused, so it never admits more: what it may cost is a Take refused
// here, when no peer lends, that a refund made since would have
// admitted, for spentFor at most (a Refund or Reset through this Store
// forgets the key at once).
type spentMemo struct {
	m sync.Map // key → *spentKey
	n atomic.Int64
	// gen counts forgets: a refusal read before one is not remembered
	// after it (the Refund may have freed what it refused).
	gen atomic.Uint64
}

type spentKey struct {
	limit *algo.Limit
	cost  int64
	at    time.Time // when the share refused
	until time.Time
	dec   algo.Decision
}

// refused reports whether r's key is remembered as refused at now for
// r's limit and cost, and sets *d to that refusal, its RetryAfter counted
// down.
func (m *spentMemo) refused(r store.Request, now time.Time, d *algo.Decision) bool {
	v, ok := m.m.Load(r.Key)
	if !ok {
		return false
	}
	k := v.(*spentKey)
	if !now.Before(k.until) {
		if m.m.CompareAndDelete(r.Key, v) {
			m.n.Add(-1)
		}
		return false
	}
	if k.limit != r.Limit || r.Cost < k.cost {
		return false
	}
	*d = k.dec
	if !d.IsNever() {
		d.RetryAfter = max(d.RetryAfter-now.Sub(k.at), time.Microsecond)
	}
	return true
}

// remember notes that this region's share refused r with d at now,
// unless a key was forgotten since gen (gen.Load() before the Take that
// refused).
func (m *spentMemo) remember(r store.Request, d algo.Decision, now time.Time, gen uint64) {
	if d.Allowed || d.RetryAfter <= 0 || r.Cost < 1 || m.gen.Load() != gen {
		return
	}
	k := &spentKey{limit: r.Limit, cost: r.Cost, at: now, until: now.Add(min(d.RetryAfter, spentFor)), dec: d}
	if _, loaded := m.m.Swap(r.Key, k); !loaded && m.n.Add(1) > maxSpent {
		m.m.Clear()
		m.n.Store(0)
	}
}

// forget drops key.
func (m *spentMemo) forget(key string) {
	m.gen.Add(1)
	if _, loaded := m.m.LoadAndDelete(key); loaded {
		m.n.Add(-1)
	}
}

// maxLoans bounds the borrowed admissions loanBook remembers; past it the
// oldest are forgotten, and a Refund of one goes to this region's own
// store, where it may free nothing (fewer admitted, never more).
const maxLoans = 1 << 16

// A loanBook remembers which peer lent each borrowed admission, by key
// and the lender's At, so that a Refund of it gives the units back to the
// lender's share: this region's store would free nothing for a sliding
// log stamped by the lender's clock, nor for a window the lender's At
// falls outside of, nor for a share of nothing. It is sharded by key, as
// admissions from borrowed slices come from every core at once.
type loanBook struct {
	seed   maphash.Seed
	shards [loanShards]loanShard
}

const loanShards = 16

type loanShard struct {
	mu    sync.Mutex
	m     map[loanKey]*loanEntry
	order []loanKey // a ring of the admissions lent, oldest at next
	next  int
}

type loanKey struct {
	key string
	at  int64
}

// A loanEntry is the admissions of a key borrowed at one At: each
// lender's not yet repaid, and the ring slots the key holds (one per
// admission lent, repaid or not), which bound them: a slot evicted takes
// one admission with it when every slot holds one.
type loanEntry struct {
	slots int
	by    []lenderCount
}

type lenderCount struct {
	p *peer
	n int
}

func (e *loanEntry) lent() int {
	n := 0
	for _, l := range e.by {
		n += l.n
	}
	return n
}

// take forgets one admission, the first lender's, and returns its lender.
func (e *loanEntry) take() *peer {
	for i := range e.by {
		if e.by[i].n > 0 {
			p := e.by[i].p
			if e.by[i].n--; e.by[i].n == 0 {
				e.by = append(e.by[:i], e.by[i+1:]...)
			}
			return p
		}
	}
	return nil
}

func (b *loanBook) shard(key string) *loanShard {
	return &b.shards[maphash.String(b.seed, key)%loanShards]
}

// lent notes that p admitted reqs at at.
func (b *loanBook) lent(reqs []store.Request, at int64, p *peer) {
	for _, r := range reqs {
		b.shard(r.Key).lent(loanKey{r.Key, at}, p)
	}
}

func (sh *loanShard) lent(k loanKey, p *peer) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[loanKey]*loanEntry)
	}
	if len(sh.order) < maxLoans/loanShards {
		sh.order = append(sh.order, k)
	} else {
		sh.evict(sh.order[sh.next])
		sh.order[sh.next] = k
		sh.next = (sh.next + 1) % len(sh.order)
	}
	e := sh.m[k]
	if e == nil {
		e = &loanEntry{}
		sh.m[k] = e
	}
	e.slots++
	for i := range e.by {
		if e.by[i].p == p {
			e.by[i].n++
			return
		}
	}
	e.by = append(e.by, lenderCount{p, 1})
}

// evict gives up the oldest slot, k's: when k's every slot holds an
// admission not repaid, one of them is forgotten.
func (sh *loanShard) evict(k loanKey) {
	e := sh.m[k]
	if e == nil {
		return
	}
	if e.slots--; e.lent() > e.slots {
		e.take()
	}
	if e.slots == 0 {
		delete(sh.m, k)
	}
}

// repaid returns the peer that lent key's admission at at, forgetting
// it, or nil when none is remembered.
func (b *loanBook) repaid(key string, at int64) *peer {
	if at == 0 {
		return nil
	}
	sh := b.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[loanKey{key, at}]; e != nil {
		return e.take() // the entry stays while its slots are in the ring
	}
	return nil
}
