package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/store"
)

// Store is a store.Store and store.Inspector on Redis: standalone,
// Sentinel or Cluster. It is safe for concurrent use.
type Store struct {
	client rueidis.Client
	mode   Mode
	o      options
	closed atomic.Bool
	specs  limitCache[[]string] // see spec
	lones  limitCache[string]   // see loneSpec
	// batches coalesce single-slot takes: one batcher outside a Cluster;
	// on a Cluster one per partition (range of 256 hash slots, the
	// failure domain of Partition), so that a master that hangs holds up
	// the batches of its own ranges only, not every master's (a call to
	// it keeps its batch's place until the store's timeout).
	batches []*batcher
	// ttlFloor is the script argument for o.testTTLFloor (ms).
	ttlFloor string

	// deadline is the context that bounds the calls made now by the
	// store's timeout (see storeCtx); deadlineMu serializes its renewal.
	deadline   atomic.Pointer[deadlineCtx]
	deadlineMu sync.Mutex

	// waitSlots bounds the calls that WAIT at once (WithWait) to the
	// client's pool for blocking commands, on which each holds a
	// connection (see runWait).
	waitSlots chan struct{}

	// beforeRollback, when set by a test, runs between a cross-slot
	// reservation that was refused and its rollback; an error stands for
	// a rollback that could not reach Redis.
	beforeRollback func() error
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.Inspector = (*Store)(nil)
)

// Open connects to the Redis deployment named by a store URL (see
// ParseURL) and loads the scripts. Options and their defaults:
//
//	WithBatchSize(64)          decisions coalesced into one script call
//	WithBatchWindow(0)         no waiting for a batch to fill
//	WithInflightBatches(2)     batches in flight at once (per 256 slots on a Cluster)
//	WithTimeout(3s)            bound on every round trip
//	WithTLSConfig(nil)         rediss:// verifies against the system roots
//	WithClientOption(nil)      adjust the rueidis client options
//	WithTestClock(nil)         the Redis server's TIME decides (tests only)
//	WithProbeKey("fg:__probe") the key of the start-up probe
//	WithWait(0, 0)             no WAIT after the writes (the URL's wait_replicas, wait_timeout)
//
// Before it returns, Open checks that the store can work: behind redis://
// or rediss://, that the server is neither a Sentinel, a Cluster node nor
// a replica (each is an error that says which URL to use); everywhere,
// that the user may load and run the scripts and that they can write (a
// probe that calls every command they call, on the probe key).
//
// A URL error, or a server of the wrong kind, wraps ErrBadURL; a user the
// ACL stops wraps ErrPermission and lists the rules it needs (ACLRules),
// as does a user or password the server refuses (WRONGPASS); a connection
// error wraps store.ErrUnavailable, with a hint when the server seems not
// to speak what the URL says (TLS or not, Redis's protocol or another's);
// a URL whose scheme does not match the server's TLS wraps ErrTLSMismatch
// too. A server that asked for a TLS client certificate and refused the
// connection (tls-auth-clients yes, Redis's default with TLS, and no
// certificate it accepts in the TLS configuration: rediss:// has none)
// wraps ErrPermission, not store.ErrUnavailable, and says what to change.
func Open(rawURL string, opts ...Option) (*Store, error) {
	e, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if e.WaitReplicas > 0 {
		// Before opts, so that an option given in code prevails.
		opts = append([]Option{WithWait(e.WaitReplicas, e.WaitTimeout)}, opts...)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	co := rueidis.ClientOption{
		InitAddress:  e.Addrs,
		Username:     e.Username,
		Password:     e.Password,
		SelectDB:     e.DB,
		TLSConfig:    tlsConfig(e, o.tls),
		DisableCache: true,
		ClientName:   "floodgate",
	}
	co.Dialer.Timeout = o.timeout
	// Bounds the wait for any reply, lone calls included, without a
	// timer per call.
	co.ConnWriteTimeout = o.timeout
	switch e.Mode {
	case Standalone:
		co.ForceSingleClient = true
	case Sentinel:
		co.Sentinel = rueidis.SentinelOption{MasterSet: e.MasterSet, TLSConfig: co.TLSConfig}
	}
	if o.client != nil {
		o.client(&co)
	}
	o.blockingPool = co.BlockingPoolSize
	client, err := rueidis.NewClient(co)
	if err != nil {
		if e.Mode == Sentinel && strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			// A server that does not know SENTINEL is no sentinel: a
			// server of the wrong kind, not an outage.
			return nil, fmt.Errorf("%w %q: %w (is it a Redis Sentinel? redis-sentinel:// takes the sentinels' addresses, not the master's)", ErrBadURL, redactURL(rawURL), err)
		}
		h := connectHint(e.Addrs, co.TLSConfig, o.timeout, err)
		if isPermission(err.Error()) {
			return nil, fmt.Errorf("redis: connect to %s: %w: %w; it needs %s (docs/STORES.md)", redactURL(rawURL), ErrPermission, err, aclHint(o.probeKey))
		}
		if hasCode(err.Error(), "WRONGPASS") || hasCode(err.Error(), "NOAUTH") {
			return nil, fmt.Errorf("redis: connect to %s: %w: %w (check the URL's user and password)", redactURL(rawURL), ErrPermission, err)
		}
		if e.Mode == Sentinel && strings.Contains(err.Error(), "No such master with that name") {
			// The sentinels answered: not an outage, and no retry changes it.
			return nil, fmt.Errorf("%w %q: the sentinels monitor no master named %q (SENTINEL MASTERS on a sentinel lists the names): %w",
				ErrBadURL, redactURL(rawURL), e.MasterSet, err)
		}
		if e.DB > 0 && strings.Contains(err.Error(), "DB index is out of range") {
			return nil, fmt.Errorf("%w %q: database %d does not exist on the server%s", ErrBadURL, redactURL(rawURL), e.DB, databases(co))
		}
		if h != nil && h.cause == ErrPermission {
			// The server refused the TLS connection's credentials: no
			// outage, which a retry or a failure policy would wait out,
			// so err, a network error, is kept as text only.
			return nil, fmt.Errorf("redis: connect to %s: %w: %v%s", redactURL(rawURL), ErrPermission, err, h.text)
		}
		if h != nil {
			// %w: a URL whose scheme does not match the server's TLS
			// wraps ErrTLSMismatch (storeurl.Transient).
			return nil, fmt.Errorf("redis: connect to %s: %w: %w%w", redactURL(rawURL), store.ErrUnavailable, err, h)
		}
		return nil, fmt.Errorf("redis: connect to %s: %w: %w", redactURL(rawURL), store.ErrUnavailable, err)
	}
	if e.Mode == Cluster && client.Mode() != rueidis.ClientModeCluster {
		// A Sentinel or a replica is no server for redis:// either: say
		// which it is (checkStandalone), else that it is a standalone one.
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		err := checkStandalone(ctx, client, e.Addrs[0], redactURL(rawURL))
		cancel()
		client.Close()
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w %q: the server is not a Redis Cluster (use redis://)", ErrBadURL, redactURL(rawURL))
	}
	if e.Mode == Standalone {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		err := checkStandalone(ctx, client, e.Addrs[0], redactURL(rawURL))
		cancel()
		if err != nil {
			client.Close()
			return nil, err
		}
	}
	s, err := newStore(client, e.Mode, o)
	if err != nil {
		client.Close()
		return nil, err
	}
	return s, nil
}

// databases says how many databases the server of co has (its databases
// setting), for the error of a database number out of range; "" when
// CONFIG GET is refused or fails.
func databases(co rueidis.ClientOption) string {
	co.SelectDB = 0
	client, err := rueidis.NewClient(co)
	if err != nil {
		return ""
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), co.Dialer.Timeout)
	defer cancel()
	kv, err := client.Do(ctx, client.B().ConfigGet().Parameter("databases").Build()).AsStrMap()
	n, err2 := strconv.Atoi(kv["databases"])
	if err != nil || err2 != nil || n < 1 {
		return ""
	}
	return fmt.Sprintf(" (its databases setting is %d: 0 to %d)", n, n-1)
}

// New wraps a rueidis client the caller configured; Close closes it. The
// options are Open's, except WithTLSConfig and WithClientOption, which
// apply to clients Open creates.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redis: New: nil client")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	mode := Standalone
	switch client.Mode() {
	case rueidis.ClientModeCluster:
		mode = Cluster
	case rueidis.ClientModeSentinel:
		mode = Sentinel
	}
	return newStore(client, mode, o)
}

// WaitLate is how late Redis may answer a WAIT after its timeout: it
// checks blocked clients' timeouts on its cron, 10 times a second at the
// default hz.
const WaitLate = 100 * time.Millisecond

// WaitBound is the longest a WAIT sent with timeout may take to answer:
// the timeout as WAIT takes it (rounded up to whole milliseconds) and
// WaitLate. A store's timeout shorter than that cuts an unacknowledged
// write short, and it fails as a store that does not answer, not as an
// *AckError.
func WaitBound(timeout time.Duration) time.Duration { return waitMS(timeout) + WaitLate }

// waitMS is d rounded up to whole milliseconds, WAIT's unit.
func waitMS(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if o.waitReplicas > 0 && WaitBound(o.waitTimeout) > o.timeout {
		// Cut short by the store's timeout, the call would fail as a
		// store that does not answer, closing its connection, not as an
		// *AckError.
		return o, fmt.Errorf("redis: WithWait: the timeout %v (wait_timeout) must be shorter than the store's timeout %v (WithTimeout) by at least %v, how late Redis may answer a WAIT that timed out",
			o.waitTimeout, o.timeout, WaitLate)
	}
	return o, nil
}

func newStore(client rueidis.Client, mode Mode, o options) (*Store, error) {
	s := &Store{client: client, mode: mode, o: o, ttlFloor: "0"}
	if o.waitReplicas > 0 {
		n := o.blockingPool
		if n <= 0 {
			n = rueidis.DefaultPoolSize
		}
		s.waitSlots = make(chan struct{}, n)
	}
	if o.testClock != nil {
		s.ttlFloor = strconv.FormatInt(o.testTTLFloor.Milliseconds(), 10)
	}
	s.batches = make([]*batcher, s.Partitions())
	for i := range s.batches {
		s.batches[i] = newBatcher(o.batchSize, o.inflight, o.batchWindow, s.execBatch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := s.loadScripts(ctx); err != nil {
		return nil, err
	}
	if err := s.probe(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// loadScripts loads the scripts on every node (SCRIPT LOAD), so that the
// first calls need no NOSCRIPT round trip; later NOSCRIPT replies (a
// restart, a failover to a fresh replica) are handled by the calls. Each
// node gets all of them in one round trip, and the nodes are loaded at
// once: one script at a time, a Cluster of six nodes took some eighty
// round trips within the store's timeout, which a distant or loaded
// Cluster could not meet at start.
func (s *Store) loadScripts(ctx context.Context) error {
	progs := allPrograms()
	nodes := s.client.Nodes()
	errs := make(chan error, len(nodes))
	for addr, n := range nodes {
		go func() { errs <- loadNode(ctx, addr, n, progs, s.o.probeKey) }()
	}
	var first error
	for range nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// loadNode loads progs on one node in one round trip.
func loadNode(ctx context.Context, addr string, n rueidis.Client, progs []program, probeKey string) error {
	cmds := make(rueidis.Commands, len(progs))
	for i, p := range progs {
		cmds[i] = n.B().ScriptLoad().Script(p.src).Build()
	}
	for i, r := range n.DoMulti(ctx, cmds...) {
		sha, err := r.ToString()
		if re, ok := rueidis.IsRedisErr(err); ok && isPermission(re.Error()) {
			return fmt.Errorf("%w to run SCRIPT LOAD on %s: %v; it needs %s (docs/STORES.md)", ErrPermission, addr, err, aclHint(probeKey))
		}
		if err != nil {
			return fmt.Errorf("redis: SCRIPT LOAD on %s: %w: %w", addr, store.ErrUnavailable, err)
		}
		if sha != progs[i].sha {
			return fmt.Errorf("redis: SCRIPT LOAD on %s returned %s, want %s", addr, sha, progs[i].sha)
		}
	}
	return nil
}

// allPrograms lists every script the store runs.
func allPrograms() []program {
	ps := []program{inspectScript, flatTakes, loneTake, probeScript}
	for _, p := range decideScripts {
		if p.sha != "" {
			ps = append(ps, p)
		}
	}
	return ps
}

// Mode reports how the store reaches Redis.
func (s *Store) Mode() Mode { return s.mode }

// Client returns the underlying rueidis client (for tests and tools).
func (s *Store) Client() rueidis.Client { return s.client }

// Close closes the connections. Calls after Close return store.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.client.Close()
	return nil
}

// specCacheMax bounds the limits whose script arguments specs and lones
// keep. They are keyed by the *algo.Limit, and callers compile limits
// anew: policy.Engine one per lease it releases or renews, limiter's
// SetParams one per call, each configuration reload one per rule.
// Unbounded, the caches kept every limit ever used, and its arguments,
// for the life of the store: a server releasing a thousand leases a
// second grew by gigabytes a day. Past the bound a cache starts afresh,
// and the limits in use are added again at their next call. 16384 is
// far more limits than a configuration has, a few megabytes at most.
const specCacheMax = 1 << 14

// limitCache keeps a value computed from each *algo.Limit, at most
// specCacheMax of them: past the bound it starts afresh.
type limitCache[V any] struct {
	m sync.Map     // *algo.Limit → V
	n atomic.Int64 // entries added since m was last cleared
}

// get returns l's value, computed by of when l has none.
func (c *limitCache[V]) get(l *algo.Limit, of func(*algo.Limit) V) V {
	if v, ok := c.m.Load(l); ok {
		return v.(V)
	}
	v, loaded := c.m.LoadOrStore(l, of(l))
	if !loaded && c.n.Add(1) > specCacheMax {
		c.n.Store(0)
		c.m.Clear()
	}
	return v.(V)
}

func (s *Store) loneSpecOf(l *algo.Limit) string { return s.lones.get(l, loneSpec) }

func (s *Store) specOf(l *algo.Limit) []string { return s.specs.get(l, spec) }

// testNow returns the test clock's time as script argument, or "" to let
// the script read the server's TIME.
func (s *Store) testNow() string {
	if s.o.testClock == nil {
		return ""
	}
	return strconv.FormatInt(s.o.testClock().UnixMicro(), 10)
}

func (s *Store) check(reqs []store.Request, out []algo.Decision) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return store.Check(reqs, out)
}

// Take decides reqs as one all-or-nothing acquisition at the Redis
// server's time. Keys that share a hash slot (always, outside a Cluster)
// are decided by one script run, atomically; on a Cluster, keys in several
// slots are reserved slot by slot and the reservations are rolled back in
// reverse order when any is refused (see the package documentation for
// what a failure between the two leaves behind).
func (s *Store) Take(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	if err := s.check(reqs, out); err != nil {
		return store.Result{}, err
	}
	if len(reqs) == 0 {
		return store.Result{Allowed: true}, nil
	}
	if err := ctx.Err(); err != nil {
		return store.Result{}, fmt.Errorf("redis: take: %w", err) // the caller's, not an outage
	}
	slot, one := s.oneSlot(reqs)
	if !one {
		return s.takeCrossSlot(ctx, reqs, out)
	}
	c := getCall(ctx, s.boundOf(ctx), opTake, reqs, out, slot, s.testNow())
	if !s.submit(c) {
		// The caller left its batch in flight: the batch still owns c.
		return store.Result{}, c.err
	}
	res, err := c.res, c.err
	putCall(c)
	return res, err
}

// Peek fills out with the decision Take would make for each request on
// its own, charging nothing.
func (s *Store) Peek(ctx context.Context, reqs []store.Request, out []algo.Decision) error {
	if err := s.check(reqs, out); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: peek: %w", err)
	}
	return s.perSlot(ctx, opPeek, reqs, out)
}

// Refund gives back units admitted by an earlier Take at Request.At (zero:
// the server's now); see algo.Limit.Refund.
func (s *Store) Refund(ctx context.Context, reqs []store.Request) error {
	if err := s.check(reqs, nil); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && len(reqs) > 0 {
		return fmt.Errorf("redis: refund: %w", err) // the caller's, not an outage (as Take)
	}
	return s.perSlot(ctx, opRefund, reqs, nil)
}

// Release gives back the Concurrency leases named by Request.Lease.
func (s *Store) Release(ctx context.Context, reqs []store.Request) error {
	if err := s.check(reqs, nil); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && len(reqs) > 0 {
		return fmt.Errorf("redis: release: %w", err) // the caller's, not an outage (as Take)
	}
	return s.perSlot(ctx, opRelease, reqs, nil)
}

// Renew extends the Concurrency leases named by Request.Lease to expire
// their limit's LeaseTTL from the server's now (store.Renewer). A lease
// that has expired or been released is not revived.
func (s *Store) Renew(ctx context.Context, reqs []store.Request) error {
	if err := s.check(reqs, nil); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil && len(reqs) > 0 {
		return fmt.Errorf("redis: renew: %w", err) // the caller's, not an outage (as Take)
	}
	return s.perSlot(ctx, opRenew, reqs, nil)
}

// Reset deletes the keys' state.
func (s *Store) Reset(ctx context.Context, keys ...string) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("%w: key %d is empty", store.ErrBadRequest, i)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	var cmds rueidis.Commands
	if s.mode != Cluster {
		cmds = append(cmds, s.client.B().Del().Key(keys...).Build())
	} else {
		for _, k := range keys {
			cmds = append(cmds, s.client.B().Del().Key(k).Build())
		}
	}
	ctx, cancel := s.syncable(ctx)
	defer cancel()
	var errs []error
	var failed []int
	for i, r := range s.client.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			errs = append(errs, callError("reset", keys[i], err))
			if s.mode == Cluster {
				failed = append(failed, s.Partition(keys[i]))
			}
		}
	}
	return s.partitionError(joinErrors(errs), failed, nil)
}

// joinErrors is the error of a call whose parts failed with errs (nil
// when none did): each part's error, so that errors.Is finds an outage
// beside another part's refusal (store/resilient answers an outage with
// its failure policy and returns any other error as it is); the one
// error as it is when only one part failed. Errors that differ only in
// the keys they quote are told once, with how many more parts failed
// alike: a dead node fails every slot of its keys with one cause.
func joinErrors(errs []error) error { return store.JoinAlike(errs, "") }

// partitionError wraps err, the failure of a call over keys of several
// Cluster slots, in a *store.PartitionError naming the partitions whose
// part failed and those whose part was not run (skipped, less those that
// failed), so that store/resilient counts it against the failed ones only
// and as a success for the others. Elsewhere, or with no partition to
// name, it returns err as it is.
func (s *Store) partitionError(err error, failed, skipped []int) error {
	if err == nil || s.mode != Cluster || len(failed) == 0 {
		return err
	}
	slices.Sort(failed)
	failed = slices.Compact(failed)
	skipped = slices.DeleteFunc(skipped, func(p int) bool { return slices.Contains(failed, p) })
	slices.Sort(skipped)
	skipped = slices.Compact(skipped)
	if len(skipped) == 0 {
		skipped = nil
	}
	return &store.PartitionError{Err: err, Failed: failed, Skipped: skipped}
}

// Inspect returns the raw state of key in algo.State's layout, and whether
// the key exists. Sorted-set states (sliding log, concurrency) are rebuilt
// from their members.
func (s *Store) Inspect(ctx context.Context, key string) (algo.State, bool, error) {
	if s.closed.Load() {
		return algo.State{}, false, store.ErrClosed
	}
	if key == "" {
		return algo.State{}, false, fmt.Errorf("%w: empty key", store.ErrBadRequest)
	}
	r := s.eval(ctx, inspectScript, []string{key}, nil)
	vals, err := r.AsStrSlice()
	if err != nil {
		return algo.State{}, false, callError("inspect", key, err)
	}
	return decodeState(key, vals)
}

// syncable returns ctx bounded by the store's timeout: ctx itself when its
// deadline comes first; the store's deadline (storeCtx, shared by the
// calls of a few milliseconds: no allocation) when ctx cannot be
// cancelled, as context.Background(); and otherwise ctx with the store's
// timeout added. Without a deadline, rueidis would wait for a reply on a
// connection shared with other callers until the connection itself fails
// (1.7 s measured with a 200 ms timeout under DEBUG SLEEP 2, 32 callers):
// the connection's reply timeout bounds only a call sent alone. A context
// that can be cancelled but has no deadline, as a request handler's, would
// also make rueidis send a call through a background writer and reader
// and keep the connection in that mode from then on: a caller alone on
// the connection would wait about a quarter longer on every later call
// (BenchmarkRedisSerial, floodgate-request-ctx). Under a deadline it
// writes the call and reads the reply on the caller's goroutine. A call
// already sent is not cut short when its context is cancelled meanwhile,
// but a context done before the call still stops it.
func (s *Store) syncable(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return s.storeCtx(time.Now()), nop
	}
	if s.boundOf(ctx) == nil {
		return ctx, nop
	}
	return context.WithTimeout(ctx, s.o.timeout)
}

// boundOf returns the store's deadline for a call made now under ctx, or
// nil when ctx's own deadline comes first.
func (s *Store) boundOf(ctx context.Context) context.Context {
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok && !dl.After(now.Add(s.o.timeout+deadlineGrain(s.o.timeout))) {
		return nil
	}
	return s.storeCtx(now)
}

// sendCtx returns the context a lone call c is sent under: its own, or
// the store's deadline, or both.
func (s *Store) sendCtx(c *call) (context.Context, context.CancelFunc) {
	switch {
	case c.bound == nil:
		return c.ctx, nop
	case c.ctx.Done() == nil:
		return c.bound, nop
	}
	dl, _ := c.bound.Deadline()
	return context.WithDeadline(c.ctx, dl)
}

// A deadlineCtx is a context whose deadline bounds by the store's timeout
// the calls made until from.
type deadlineCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	until  time.Time
}

// deadlineGrain is how long one store deadline serves new calls: a call
// made at t ends by t + timeout + grain at the latest (and by t + timeout
// when sent alone on a connection, by its reply timeout).
func deadlineGrain(timeout time.Duration) time.Duration {
	return min(timeout/8, 10*time.Millisecond)
}

// storeCtx returns a context whose deadline is between now + the store's
// timeout and that plus deadlineGrain, shared by the calls of a grain:
// bounding a call by the store's timeout allocates nothing. The contexts
// replaced end at their deadline.
func (s *Store) storeCtx(now time.Time) context.Context {
	if d := s.deadline.Load(); d != nil && !now.After(d.until) {
		return d.ctx
	}
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	if d := s.deadline.Load(); d != nil && !now.After(d.until) {
		return d.ctx
	}
	grain := deadlineGrain(s.o.timeout)
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(s.o.timeout+grain))
	s.deadline.Store(&deadlineCtx{ctx: ctx, cancel: cancel, until: now.Add(grain)})
	return ctx
}

func nop() {}

// eval runs a program by EVALSHA, and by EVAL when the server does not
// know it (NOSCRIPT: a restart or a failover lost the script cache).
func (s *Store) eval(ctx context.Context, p program, keys, args []string) rueidis.RedisResult {
	ctx, cancel := s.syncable(ctx)
	defer cancel()
	r := s.client.Do(ctx, s.scriptCmd(p, keys, args, false))
	if isNoScript(r.Error()) {
		r = s.client.Do(ctx, s.scriptCmd(p, keys, args, true))
	}
	return r
}

// scriptCmd is the call of program p on keys with args: by EVALSHA, or,
// withSource, by EVAL, which also loads p on the server that runs it.
func (s *Store) scriptCmd(p program, keys, args []string, withSource bool) rueidis.Completed {
	if withSource {
		return s.client.B().Eval().Script(p.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return s.client.B().Evalsha().Sha1(p.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// evalMulti runs several calls of the decision script, pipelined (and
// sent to each key's node on a Cluster). A call of one group refused with
// TRYAGAIN is sent again (retryTryAgain); a coalesced batch (several
// groups) is not: execBatch splits it (execApart).
func (s *Store) evalMulti(ctx context.Context, calls []scriptArgs) []reply {
	ctx, cancel := s.syncable(ctx)
	defer cancel()
	res := s.evalMultiOnce(ctx, calls)
	s.retryTryAgain(ctx, calls, res, func(i int) bool { return calls[i].groups == 1 })
	return res
}

func (s *Store) evalMultiOnce(ctx context.Context, calls []scriptArgs) []reply {
	if len(calls) == 1 {
		return []reply{s.evalAck(ctx, programFor(&calls[0]), calls[0].keys, calls[0].argv(s.ttlFloor), calls[0].writes)}
	}
	if s.o.waitReplicas > 0 && slices.ContainsFunc(calls, func(c scriptArgs) bool { return c.writes }) {
		return s.evalAckEach(ctx, calls)
	}
	cmds := make(rueidis.Commands, len(calls))
	args := make([][]string, len(calls))
	for i, c := range calls {
		args[i] = c.argv(s.ttlFloor)
		cmds[i] = s.scriptCmd(programFor(&calls[i]), c.keys, args[i], false)
	}
	res := make([]reply, len(calls))
	var lost []int // the calls answered NOSCRIPT
	for i, r := range s.client.DoMulti(ctx, cmds...) {
		res[i].RedisResult = r
		if isNoScript(r.Error()) {
			lost = append(lost, i)
		}
	}
	if len(lost) > 0 {
		s.reloadMulti(ctx, calls, args, res, lost)
	}
	return res
}

// reloadMulti sends again, pipelined, the calls of a batch whose EVALSHA
// met a server that no longer knew the script (NOSCRIPT: a restart or a
// failover lost its script cache), and writes their replies into res.
// One at a time, each would cost a round trip (a batch of 64 after a
// failover would wait 64 of them, past the store's timeout on a distant
// server). The first call of each program is sent by EVAL, which loads
// it, and the others by EVALSHA behind it: on one server they run after
// the load. On a Cluster, the calls whose node was not the one loaded
// answer NOSCRIPT again and are sent by EVAL, pipelined, in one more
// round.
func (s *Store) reloadMulti(ctx context.Context, calls []scriptArgs, args [][]string, res []reply, lost []int) {
	build := func(i int, withSource bool) rueidis.Completed {
		return s.scriptCmd(programFor(&calls[i]), calls[i].keys, args[i], withSource)
	}
	cmds := make(rueidis.Commands, len(lost))
	var loaded []string // the programs' sha1s sent with their source
	for j, i := range lost {
		sha := programFor(&calls[i]).sha
		first := !slices.Contains(loaded, sha)
		if first {
			loaded = append(loaded, sha)
		}
		cmds[j] = build(i, first)
	}
	again := lost[:0]
	for j, r := range s.client.DoMulti(ctx, cmds...) {
		res[lost[j]].RedisResult = r
		if isNoScript(r.Error()) {
			again = append(again, lost[j])
		}
	}
	if len(again) == 0 {
		return
	}
	cmds = cmds[:len(again)]
	for j, i := range again {
		cmds[j] = build(i, true)
	}
	for j, r := range s.client.DoMulti(ctx, cmds...) {
		res[again[j]].RedisResult = r
	}
}

// Slot migrations. While a Cluster moves a hash slot from one master to
// another (redis-cli --cluster reshard or rebalance), its keys move a few
// at a time, and a script over several keys of the slot, some moved and
// some not, is refused with TRYAGAIN by the node importing it — before it
// runs, so sending it again cannot charge twice. A coalesced batch holds
// many keys of one slot and would be refused until the last of them
// moved, failing every decision of the slot, and with them the breaker of
// its range of slots: it is split into its callers' calls (execApart),
// each of one key sent again at once by the client's ASK redirection. A
// call whose own keys are apart (a hash-tagged all-or-nothing take, a
// sliding log's or a concurrency limit's several keys) is sent again after
// tryAgainFirst, doubling up to tryAgainMax, while its context lasts: the
// migration moves its keys within milliseconds unless the slot holds very
// many. It then fails with the TRYAGAIN error (store.ErrUnavailable).
const (
	tryAgainFirst = 2 * time.Millisecond
	tryAgainMax   = 50 * time.Millisecond
)

func isTryAgain(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsTryAgain()
}

// waitTryAgain waits *d before a TRYAGAIN call is sent again and doubles
// *d (up to tryAgainMax); it reports false, at once, when ctx would end
// first.
func waitTryAgain(ctx context.Context, d *time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= *d {
		return false
	}
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*d = min(2**d, tryAgainMax)
	return true
}

// retryTryAgain sends again, pipelined, the calls whose result in res is
// TRYAGAIN and which retry accepts, until none is refused so or ctx ends;
// res holds the last result of each.
func (s *Store) retryTryAgain(ctx context.Context, calls []scriptArgs, res []reply, retry func(i int) bool) {
	var pending []int
	for i, r := range res {
		if isTryAgain(r.Error()) && retry(i) {
			pending = append(pending, i)
		}
	}
	for wait := tryAgainFirst; len(pending) > 0 && waitTryAgain(ctx, &wait); {
		sub := make([]scriptArgs, len(pending))
		for j, i := range pending {
			sub[j] = calls[i]
		}
		again := s.evalMultiOnce(ctx, sub)
		next := pending[:0]
		for j, i := range pending {
			res[i] = again[j]
			if isTryAgain(again[j].Error()) && retry(i) {
				next = append(next, i)
			}
		}
		pending = next
	}
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsNoScript()
}

// scriptArgs collect the KEYS and ARGV of one call of the decision
// script: the distinct limits go once in a header (specs, head), each
// request names its limit by index (body).
type scriptArgs struct {
	keys []string
	fams uint8 // the algorithm families named (see familyOf)
	// singleTakes is whether every group so far is a one-key take.
	singleTakes bool
	// calendar is whether a limit is a calendar fixed window.
	calendar bool
	// writes is whether a group is of another op than peek.
	writes bool
	// args is storage for the ARGV of a pooled scriptArgs.
	args   []string
	specs  []*algo.Limit
	head   []string
	body   []string
	groups int
}

// specIndex returns l's index in the call's header, adding it if new.
func (s *Store) specIndex(sa *scriptArgs, l *algo.Limit) string {
	for i, x := range sa.specs {
		if x == l {
			return itoa(int64(i + 1))
		}
	}
	sa.specs = append(sa.specs, l)
	sa.fams |= familyOf(l.Algorithm())
	sa.calendar = sa.calendar || l.Params().Calendar != algo.CalendarNone
	sa.head = append(sa.head, s.specOf(l)...)
	return itoa(int64(len(sa.specs)))
}

// argv returns the script's ARGV (see lua/main.lua).
func (sa *scriptArgs) argv(ttlFloor string) []string {
	return sa.appendArgv(make([]string, 0, 3+len(sa.head)+len(sa.body)), ttlFloor)
}

func (sa *scriptArgs) appendArgv(args []string, ttlFloor string) []string {
	args = append(args, itoa(int64(sa.groups)), ttlFloor, itoa(int64(len(sa.specs))))
	args = append(args, sa.head...)
	return append(args, sa.body...)
}

// reset empties sa for reuse, keeping its storage.
func (sa *scriptArgs) reset() {
	clear(sa.specs)
	clear(sa.keys)
	clear(sa.args)
	*sa = scriptArgs{keys: sa.keys[:0], specs: sa.specs[:0], head: sa.head[:0], body: sa.body[:0], args: sa.args[:0]}
}

// appendGroup appends one group (see lua/main.lua) to a script call: the
// requests reqs[idx[j]] (all of reqs when idx is nil). ats, when not nil,
// replaces the requests' at argument (indexed like reqs; a rollback's
// undo.arg).
func (s *Store) appendGroup(sa *scriptArgs, op, now string, reqs []store.Request, idx []int, ats []string) {
	n := len(reqs)
	if idx != nil {
		n = len(idx)
	}
	if sa.groups == 0 {
		sa.singleTakes = true
	}
	sa.groups++
	sa.singleTakes = sa.singleTakes && op == opTake && n == 1
	sa.writes = sa.writes || op != opPeek
	sa.body = append(sa.body, op, now, itoa(int64(n)))
	for j := 0; j < n; j++ {
		i := j
		if idx != nil {
			i = idx[j]
		}
		r := &reqs[i]
		sa.keys = append(sa.keys, r.Key)
		spec := s.specIndex(sa, r.Limit)
		rat := ""
		if ats != nil {
			rat = ats[i]
		} else if r.At != 0 {
			rat = strconv.FormatInt(r.At, 10)
		}
		sa.body = append(sa.body, spec, itoa(r.Cost), utoa(r.Lease), rat)
	}
}

// undo is what the rollback of one request of a cross-slot reservation
// needs: the time its units were stamped with, and the undo token of the
// smooth algorithms (see lua/main.lua's undoTokens), "" for the others.
type undo struct {
	stamp int64
	token string
}

// arg is the request's at argument of a rollback: the stamp, then "|"
// and the token when there is one.
func (u undo) arg() string {
	at := ""
	if u.stamp != 0 {
		at = strconv.FormatInt(u.stamp, 10)
	}
	if u.token == "" {
		return at
	}
	return at + "|" + u.token
}

// groupReply walks a script reply group by group.
type groupReply struct {
	v   []rueidis.RedisMessage
	pos int
	err error // the first value that was not an integer
}

// int returns value i of the reply.
func (g *groupReply) int(i int) int64 {
	n, err := g.v[i].AsInt64()
	if err != nil && g.err == nil {
		g.err = badReply(err)
	}
	return n
}

func (g *groupReply) header() (status, now int64, err error) {
	if g.pos+2 > len(g.v) {
		return 0, 0, errShortReply
	}
	status, now = g.int(g.pos), g.int(g.pos+1)
	g.pos += 2
	return status, now, g.err
}

// decision reads one request's decision; a reserve reply has a sixth
// value, the time the units were stamped with, which goes to u.stamp, and
// a seventh, the undo token its rollback restores the state with ("" for
// the algorithms whose rollback is exact without one; see lua/main.lua's
// undoTokens), which goes to u.token.
func (g *groupReply) decision(l *algo.Limit, u *undo) (algo.Decision, error) {
	width := 5
	if u != nil {
		width = 7
	}
	if g.pos+width > len(g.v) {
		return algo.Decision{}, errShortReply
	}
	p := g.pos
	g.pos += width
	if u != nil {
		u.stamp = g.int(p + 5)
		tok, err := g.v[p+6].ToString()
		if err != nil && g.err == nil {
			g.err = badReply(err)
		}
		u.token = tok
	}
	retry := g.int(p + 2)
	d := algo.Decision{
		Allowed:    g.int(p) == 1,
		Limit:      l.Capacity(),
		Remaining:  g.int(p + 1),
		RetryAfter: micros(retry),
		ResetAfter: micros(g.int(p + 3)),
		Delay:      micros(g.int(p + 4)),
	}
	if retry < 0 {
		d.RetryAfter = algo.Never
	}
	return d, g.err
}

// micros is algo's: a µs count as a Duration, saturating below Never (a
// wait of more than 292 years is not one a caller can act on).
func micros(us int64) time.Duration {
	switch {
	case us <= 0:
		return 0
	case us >= int64(algo.Never/time.Microsecond):
		return algo.Never - 1
	}
	return time.Duration(us) * time.Microsecond
}

func (g *groupReply) skip(n int) error {
	if g.pos+n > len(g.v) {
		return errShortReply
	}
	g.pos += n
	return nil
}

// A script reply that is not the script's (too short, a value of
// another type) is a sign of a broken connection or of a proxy that
// mangles replies, not of the deployment's configuration: an outage, for
// the failure policy to answer (store.ErrUnavailable).
var errShortReply = fmt.Errorf("redis: script reply too short: %w", store.ErrUnavailable)

// badReply is the error of a script reply holding a value that is not
// what the script returns there (err: how not); see errShortReply.
func badReply(err error) error {
	return fmt.Errorf("redis: bad script reply: %w: %w", store.ErrUnavailable, err)
}

// decodeTake fills out from a take group's reply (and undos from a
// reserve reply, indexed like reqs). A refused group reports each request
// as if nothing had been charged (store.Unwind).
func decodeTake(g *groupReply, reqs []store.Request, idx []int, out []algo.Decision, undos []undo) (store.Result, error) {
	status, now, err := g.header()
	if err != nil {
		return store.Result{}, err
	}
	res := store.Result{Allowed: status == 1, At: now}
	n := len(reqs)
	if idx != nil {
		n = len(idx)
	}
	for j := 0; j < n; j++ {
		i := j
		if idx != nil {
			i = idx[j]
		}
		var u *undo
		if undos != nil {
			u = &undos[i]
		}
		d, err := g.decision(reqs[i].Limit, u)
		if err != nil {
			return res, err
		}
		if !res.Allowed {
			d = store.Unwind(d, reqs[i].Cost)
		}
		out[i] = d
	}
	return res, nil
}

// oneSlot reports whether one script call may hold every key of reqs, and
// the keys' slot (0 outside a Cluster).
func (s *Store) oneSlot(reqs []store.Request) (int, bool) {
	if s.mode != Cluster {
		return 0, true
	}
	slot := Slot(reqs[0].Key)
	for i := 1; i < len(reqs); i++ {
		if Slot(reqs[i].Key) != slot {
			return slot, false
		}
	}
	return slot, true
}

// slotGroups partitions the indexes of reqs by hash slot, in order of
// first appearance.
func (s *Store) slotGroups(reqs []store.Request) [][]int {
	if s.mode != Cluster {
		idx := make([]int, len(reqs))
		for i := range idx {
			idx[i] = i
		}
		return [][]int{idx}
	}
	var groups [][]int
	slots := map[int]int{}
	for i := range reqs {
		sl := Slot(reqs[i].Key)
		g, ok := slots[sl]
		if !ok {
			g = len(groups)
			slots[sl] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// perSlot runs op over reqs, one script call per hash slot; these ops
// (peek, refund, release, renew) need no atomicity across keys.
func (s *Store) perSlot(ctx context.Context, op string, reqs []store.Request, out []algo.Decision) error {
	if len(reqs) == 0 {
		return nil
	}
	groups := s.slotGroups(reqs)
	now := s.testNow()
	calls := make([]scriptArgs, len(groups))
	for gi, idx := range groups {
		s.appendGroup(&calls[gi], op, now, reqs, idx, nil)
	}
	var errs []error
	var failed []int
	for gi, r := range s.evalMulti(ctx, calls) {
		if err := decodePerSlot(op, r, reqs, groups[gi], out); err != nil {
			errs = append(errs, err)
			failed = append(failed, s.Partition(reqs[groups[gi][0]].Key))
		}
	}
	return s.partitionError(joinErrors(errs), failed, nil)
}

// decodePerSlot reads the reply r of one slot's call of perSlot, the
// requests idx of reqs.
func decodePerSlot(op string, r reply, reqs []store.Request, idx []int, out []algo.Decision) error {
	v, err := r.ToArray()
	if err != nil {
		return callError(opName(op), reqs[idx[0]].Key, err)
	}
	if r.unacked != nil {
		return fmt.Errorf("redis: %s %q: %w", opName(op), reqs[idx[0]].Key, r.unacked)
	}
	g := &groupReply{v: v}
	if _, _, err := g.header(); err != nil {
		return err
	}
	switch op {
	case opPeek:
		for _, i := range idx {
			if out[i], err = g.decision(reqs[i].Limit, nil); err != nil {
				return err
			}
		}
	case opRelease, opRenew:
		return g.skip(len(idx))
	}
	return nil
}

func opName(op string) string {
	switch op {
	case opTake, opReserve:
		return "take"
	case opPeek:
		return "peek"
	case opRefund:
		return "refund"
	case opRollback:
		return "rollback"
	case opRelease:
		return "release"
	case opRenew:
		return "renew"
	}
	return op
}

// serverTime reads the Redis TIME of some node, in µs.
func (s *Store) serverTime(ctx context.Context) (int64, error) {
	return s.timeOf(ctx, s.client.B().Time().Build())
}

// timeOf runs cmd, a TIME, and reads its reply in µs. A reply that is not
// TIME's is an error of its own, which its caller's callError, as for any
// error that is not a server's error reply, makes an outage
// (store.ErrUnavailable): a sign of a broken connection or proxy.
func (s *Store) timeOf(ctx context.Context, cmd rueidis.Completed) (int64, error) {
	ctx, cancel := s.syncable(ctx)
	defer cancel()
	v, err := s.client.Do(ctx, cmd).AsStrSlice()
	if err != nil {
		return 0, err
	}
	if len(v) != 2 {
		return 0, fmt.Errorf("redis: bad TIME reply %q", v)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	us, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("redis: bad TIME reply %q", v)
	}
	return sec*1e6 + us, nil
}

// takeCrossSlot is Take over keys in several Cluster hash slots: every
// slot's keys are reserved by one script call at one common time, so that
// Refund finds the charges: the first slot's at its node's TIME, then the
// others', pipelined, at the time it decided at (see reserveCrossSlot).
// When any slot refuses or fails, the slots that admitted are rolled back
// in reverse order. Its failure is a *store.PartitionError naming the
// partitions of the slots whose reservation, roll-back or look (see
// failedFirst, refusedFirst) failed (or, when the first slot's failed and
// ctx is done, that one, the others not reached), whose Err joins each of
// those slots' errors; with Result.Partial when a slot refused all the
// same.
func (s *Store) takeCrossSlot(ctx context.Context, reqs []store.Request, out []algo.Decision) (store.Result, error) {
	groups := s.slotGroups(reqs)
	parts := make([]int, len(groups))
	for gi, idx := range groups {
		parts[gi] = s.Partition(reqs[idx[0]].Key)
	}
	var now int64 // 0: the first slot's server time
	if s.o.testClock != nil {
		now = s.o.testClock().UnixMicro()
	}
	return s.reserveCrossSlot(ctx, reqs, out, groups, parts, now)
}

// reserveCrossSlot is takeCrossSlot's reservation of groups (the slots'
// requests, parts their partitions) at now. A key whose state had seen a
// later time than now (another take of it ran between the TIME read and
// the reservation, or its node's clock is ahead) is decided and stamped
// at that time, a state's time never moving back, while Result.At says
// now. A sliding log's Refund at Result.At still finds its units (it gives
// back the oldest stamped at or after At, within the log's period), and a
// window's in the same window; a window's stamped past its end, or a
// sliding window's in a later sub-window, are not given back (refusing,
// never admitting). Rolling back and reserving again for those cost round
// trips on every Take while a node's clock was ahead, and was taken out.
//
// With now 0, the first slot is reserved first, at its server's TIME, and
// the others then at the time it decided at: its keys, which a TIME read
// one round trip earlier would leave to races, are stamped at the time
// its script reads.
func (s *Store) reserveCrossSlot(ctx context.Context, reqs []store.Request, out []algo.Decision, groups [][]int, parts []int, now int64) (store.Result, error) {
	calls := make([]scriptArgs, len(groups))
	var results []reply
	if now == 0 {
		start := time.Now()
		s.appendGroup(&calls[0], opReserve, "", reqs, groups[0], nil)
		results = s.evalMulti(ctx, calls[:1])
		v, err := results[0].ToArray()
		var status int64
		if err == nil {
			status, now, err = (&groupReply{v: v}).header()
		}
		if err != nil {
			// Not reserved, or not known to be: the others are not
			// reserved, only looked at (failedFirst).
			err = callError("take", reqs[groups[0][0]].Key, err)
			return s.failedFirst(ctx, start.Add(s.o.timeout), reqs, out, groups, parts, err)
		}
		if status == 0 && len(groups) > 1 {
			return s.refusedFirst(ctx, reqs, out, groups, parts, now, v)
		}
	}
	nowArg := strconv.FormatInt(now, 10)
	for gi := len(results); gi < len(groups); gi++ {
		s.appendGroup(&calls[gi], opReserve, nowArg, reqs, groups[gi], nil)
	}
	undos := make([]undo, len(reqs))
	results = append(results, s.evalMulti(ctx, calls[len(results):])...)
	admitted, errored := make([]bool, len(groups)), make([]bool, len(groups))
	allowed, refused := true, false
	var errs, unackedErrs []error
	var failed, unacked []int
	for gi, r := range results {
		v, err := r.ToArray()
		if err == nil {
			var res store.Result
			res, err = decodeTake(&groupReply{v: v}, reqs, groups[gi], out, undos)
			admitted[gi] = err == nil && res.Allowed
			refused = refused || (err == nil && !res.Allowed)
			if err == nil && admitted[gi] && r.unacked != nil {
				// Reserved, and rolled back below, but not admitted: the
				// take fails unless another slot refused it.
				allowed = false
				unacked = append(unacked, parts[gi])
				unackedErrs = append(unackedErrs, fmt.Errorf("redis: take %q: %w", reqs[groups[gi][0]].Key, r.unacked))
			}
		}
		if err != nil {
			errs = append(errs, callError("take", reqs[groups[gi][0]].Key, err))
			failed = append(failed, parts[gi])
			errored[gi] = true
		}
		if !admitted[gi] || err != nil {
			allowed = false
		}
	}
	if allowed {
		return store.Result{Allowed: true, At: now}, nil
	}
	// A slot that refused decides, as a single-slot take the script
	// refused stands under WithWait: the reservations that were not
	// acknowledged are rolled back and admitted nothing, and a roll-back
	// that was not acknowledged can only leave a failover a charge that
	// lapses by itself. It decides beside a slot that failed, or a
	// roll-back that did, too (Result.Partial): as an error alone, the
	// failure policy would answer a request over its limit (and admit it,
	// failing open).
	if !refused {
		failed = append(failed, unacked...)
		errs = append(errs, unackedErrs...)
	}
	unrolled, err := s.rollback(ctx, reqs, groups, admitted, undos, refused)
	for _, gi := range unrolled {
		failed = append(failed, parts[gi]) // a live node's failed roll-back is its own failure
	}
	if err != nil {
		errs = append(errs, err)
	}
	for gi, idx := range groups {
		for _, i := range idx {
			switch {
			case errored[gi]:
				out[i] = algo.Decision{} // not decided (Result.Partial)
			case admitted[gi] && !slices.Contains(unrolled, gi):
				out[i] = store.Unwind(out[i], reqs[i].Cost)
			}
			// A group whose roll-back failed keeps its charged decision:
			// the charge stays until it lapses.
		}
	}
	return store.Result{At: now, Partial: refused && len(errs) > 0}, s.partitionError(joinErrors(errs), failed, nil)
}

// refusedFirst ends a cross-slot Take whose first slot, reserved alone,
// refused (v its reply, now its time): the others are looked at (a peek
// at now, charging nothing) for their decisions, rather than reserved
// and rolled back. A look that fails leaves the refusal standing
// (Result.Partial), its requests undecided.
func (s *Store) refusedFirst(ctx context.Context, reqs []store.Request, out []algo.Decision, groups [][]int, parts []int, now int64, v []rueidis.RedisMessage) (store.Result, error) {
	undos := make([]undo, len(reqs))
	var errs []error
	var failed []int
	decided := true
	if _, err := decodeTake(&groupReply{v: v}, reqs, groups[0], out, undos); err != nil {
		errs = append(errs, callError("take", reqs[groups[0][0]].Key, err))
		failed = append(failed, parts[0])
		decided = false
	}
	_, _, perrs, pfailed, _ := s.peekRest(ctx, reqs, out, groups, parts, strconv.FormatInt(now, 10), false)
	errs, failed = append(errs, perrs...), append(failed, pfailed...)
	return store.Result{At: now, Partial: decided && len(errs) > 0}, s.partitionError(joinErrors(errs), failed, nil)
}

// failedFirst ends a cross-slot Take whose first slot's reservation
// failed (err), which cannot be admitted now: the other slots are not
// reserved but looked at (a peek at their nodes' time, charging nothing),
// so that a key of theirs over its limit refuses the take all the same
// (Result.Partial), as when a later slot fails, rather than leave the
// caller's failure policy to answer a request a live key refused (and
// admit it, failing open). The first slot's requests are not decided.
// The look shares the store's timeout with the first slot's reservation
// (deadline, the timeout from when it was sent), so that a Take still
// takes at most one timeout: once deadline or ctx is done, the others
// are not reached. A caller with a deadline of its own (store/resilient)
// has answered the Take by then.
func (s *Store) failedFirst(ctx context.Context, deadline time.Time, reqs []store.Request, out []algo.Decision, groups [][]int, parts []int, err error) (store.Result, error) {
	if ctx.Err() != nil || !time.Now().Before(deadline) {
		return store.Result{}, s.partitionError(err, parts[:1], parts[1:])
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	at, refused, errs, failed, skipped := s.peekRest(ctx, reqs, out, groups, parts, "", true)
	errs, failed = append([]error{err}, errs...), append([]int{parts[0]}, failed...)
	res := store.Result{At: at, Partial: refused}
	for _, i := range groups[0] {
		out[i] = algo.Decision{} // not decided (Result.Partial)
	}
	return res, s.partitionError(joinErrors(errs), failed, skipped)
}

// peekRest looks at groups[1:] (a peek at nowArg, "" for each node's own
// time, charging nothing) for their decisions, after the first slot's
// reservation refused or failed: out gets each decided request's decision
// with nothing charged, the zero Decision (undecided) for a group whose
// peek failed. It returns the latest time the peeks decided at, whether a
// decided request was refused, and the failed groups' errors and
// partitions; with cutSkips, a group cut short by ctx's deadline is
// skipped (not known to fail) instead.
func (s *Store) peekRest(ctx context.Context, reqs []store.Request, out []algo.Decision, groups [][]int, parts []int, nowArg string, cutSkips bool) (at int64, refused bool, errs []error, failed, skipped []int) {
	calls := make([]scriptArgs, len(groups)-1)
	for gi := 1; gi < len(groups); gi++ {
		s.appendGroup(&calls[gi-1], opPeek, nowArg, reqs, groups[gi], nil)
	}
	for j, r := range s.evalMulti(ctx, calls) {
		gi := j + 1
		v, err := r.ToArray()
		var res store.Result
		if err == nil {
			res, err = decodeTake(&groupReply{v: v}, reqs, groups[gi], out, nil)
		}
		if err != nil {
			for _, i := range groups[gi] {
				out[i] = algo.Decision{} // not decided (Result.Partial)
			}
			if cutSkips && ctx.Err() != nil {
				skipped = append(skipped, parts[gi])
				continue
			}
			errs = append(errs, callError("take", reqs[groups[gi][0]].Key, err))
			failed = append(failed, parts[gi])
			continue
		}
		at = max(at, res.At)
		for _, i := range groups[gi] {
			refused = refused || !out[i].Allowed
			out[i] = store.Unwind(out[i], reqs[i].Cost)
		}
	}
	return at, refused, errs, failed, skipped
}

// rollback undoes the admitted groups' reservations, last first, within
// the store's timeout even if ctx is done: a reservation left in place
// would refuse others until it expires. It returns the indexes of the
// groups whose roll-back failed, and the error; a roll-back the replicas
// did not acknowledge (WithWait) is one unless refusedAnyway (a slot
// refused the take, which that refusal decides).
func (s *Store) rollback(ctx context.Context, reqs []store.Request, groups [][]int, admitted []bool, undos []undo, refusedAnyway bool) ([]int, error) {
	var calls []scriptArgs
	var keys []string
	var gis []int
	for gi := len(groups) - 1; gi >= 0; gi-- {
		if !admitted[gi] {
			continue
		}
		var sa scriptArgs
		idx := make([]int, len(groups[gi]))
		for j := range idx {
			idx[j] = groups[gi][len(idx)-1-j]
		}
		ats := make([]string, len(reqs))
		for _, i := range idx {
			ats[i] = undos[i].arg()
		}
		s.appendGroup(&sa, opRollback, s.testNow(), reqs, idx, ats)
		calls = append(calls, sa)
		keys = append(keys, reqs[idx[0]].Key)
		gis = append(gis, gi)
	}
	if len(calls) == 0 {
		return nil, nil
	}
	if s.beforeRollback != nil {
		if err := s.beforeRollback(); err != nil {
			return gis, fmt.Errorf("redis: roll back the reservation of %q: %w: %w (the charges lapse by themselves; see the store/redis package documentation)", keys[0], store.ErrUnavailable, err)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.timeout)
	defer cancel()
	var errs []error
	var failed []int
	for i, r := range s.evalMulti(rctx, calls) {
		if err := r.Error(); err != nil {
			errs = append(errs, callError("roll back the reservation of", keys[i], err))
			failed = append(failed, gis[i])
		} else if r.unacked != nil && !refusedAnyway {
			errs = append(errs, fmt.Errorf("redis: roll back the reservation of %q: %w", keys[i], r.unacked))
			failed = append(failed, gis[i])
		}
	}
	if len(errs) > 0 {
		return failed, fmt.Errorf("%w (the charges lapse by themselves; see the store/redis package documentation)", errors.Join(errs...))
	}
	return nil, nil
}

// submit sends a single-slot call through its partition's batcher, or on
// its own when batching is off, and reports whether it was decided (see batcher.do).
func (s *Store) submit(c *call) bool {
	if s.o.batchSize <= 1 {
		c.taken = true
		c.one[0] = c
		s.execBatch(c.one[:])
		c.one[0] = nil
		<-c.sig
		return true
	}
	return s.batches[c.slot/slotsPerPartition].do(c)
}

// notSent is the error of a call whose deadline passed while it was
// queued: it was never sent, and charged nothing.
func notSent(c *call) error {
	return fmt.Errorf("redis: take %q: %w: %w (queued behind batches in flight; not sent)", c.reqs[0].Key, store.ErrUnavailable, c.stopErr())
}

// abandoned is the error of a call whose deadline passed while its batch
// was in flight, the error of a lone call cut short by its deadline: it
// may have been charged (see docs/STORES.md).
func abandoned(c *call) error {
	return fmt.Errorf("redis: take %q: %w: %w", c.reqs[0].Key, store.ErrUnavailable, c.stopErr())
}

// execBatch runs calls (single-slot takes) as few script calls as the
// deployment allows: one outside a Cluster, one per hash slot on it.
func (s *Store) execBatch(calls []*call) {
	// A lone call runs under its caller's context (bounded by the
	// store's timeout); a batch, which serves several callers, under the
	// store's timeout: a caller whose own deadline passes first leaves it
	// (see batcher.wait).
	var ctx context.Context
	if len(calls) > 1 {
		ctx = s.storeCtx(time.Now())
	} else {
		var cancel context.CancelFunc
		ctx, cancel = s.sendCtx(calls[0])
		defer cancel()
	}
	if len(calls) == 1 && s.takeLone(ctx, calls[0]) {
		return
	}
	if s.mode != Cluster || len(calls) == 1 {
		sa := argsPool.Get().(*scriptArgs)
		for _, c := range calls {
			s.appendGroup(sa, c.op, c.now, c.reqs, nil, nil)
		}
		sa.args = sa.appendArgv(sa.args[:0], s.ttlFloor)
		for _, c := range calls {
			c.sent()
		}
		r := s.evalAck(ctx, programFor(sa), sa.keys, sa.args, sa.writes)
		if s.splits(len(calls), r.Error()) {
			s.execApart(calls, r)
		} else {
			s.finish(calls, r)
		}
		sa.reset()
		argsPool.Put(sa)
		return
	}
	bySlot := map[int][]*call{}
	var order []int
	for _, c := range calls {
		if _, ok := bySlot[c.slot]; !ok {
			order = append(order, c.slot)
		}
		bySlot[c.slot] = append(bySlot[c.slot], c)
	}
	sas := make([]scriptArgs, len(order))
	for i, sl := range order {
		cs := bySlot[sl]
		for _, c := range cs {
			s.appendGroup(&sas[i], c.op, c.now, c.reqs, nil, nil)
		}
	}
	for _, c := range calls {
		c.sent()
	}
	for i, r := range s.evalMultiOnce(ctx, sas) {
		if cs := bySlot[order[i]]; s.splits(len(cs), r.Error()) {
			s.execApart(cs, r)
		} else {
			s.finish(cs, r)
		}
	}
}

// splits reports whether the n calls of one script call that failed with
// err are to be decided apart (execApart) rather than all fail with err:
// on a Cluster, a migration of their slot (TRYAGAIN); when the script
// call coalesced several calls, the ACL's refusal of one of its keys
// (keysRefused), which would otherwise fail the callers whose keys the
// user may reach with the ErrPermission of another caller's key. Both
// refuse the script call before it runs: sent again, no call is charged
// twice. Other refusals (a command the user may not run, WRONGTYPE, an
// unknown command) would refuse each call alike, or may come after the
// script wrote some keys: they are not sent again.
func (s *Store) splits(n int, err error) bool {
	return (s.mode == Cluster && isTryAgain(err)) || (n > 1 && keysRefused(err))
}

// execApart decides calls, refused as one script call (r) by a migration
// of their slot (TRYAGAIN) or by the ACL for one of their keys (see
// splits): each is sent again as a script call of its own, on a goroutine
// of its own, so that the batch's sender goes on with the next batch. A
// call of one key, or of keys on one side of the migration, is decided at
// once, and a call of a key the ACL refuses fails alone, with its own key.
// The others are sent again (see tryAgainFirst) while their context lasts.
// Each runs under its caller's context and the store's deadline, as a
// lone call does (sendCtx): its caller, which waits for it (the call is
// claimed, to read its requests again), returns by its deadline. Under
// one context of the store's timeout for all of them, a caller whose own
// deadline passed meanwhile waited up to that timeout. A caller that left
// before is not sent again.
func (s *Store) execApart(calls []*call, r reply) {
	calls = slices.DeleteFunc(slices.Clone(calls), func(c *call) bool { return !c.claim() }) // the batcher reuses its batch's slice
	// A lone TRYAGAIN call has its reply: sent again after tryAgainFirst
	// (retryTryAgain). A call left of a batch is sent again at once: its
	// keys alone may be on one side of the migration, and a call left of
	// a batch the ACL refused may be of a key the user reaches.
	lone := len(calls) == 1 && isTryAgain(r.Error())
	for _, c := range calls {
		go func() {
			ctx, cancel := s.sendCtx(c)
			defer cancel()
			sa := make([]scriptArgs, 1)
			s.appendGroup(&sa[0], c.op, c.now, c.reqs, nil, nil)
			var res []reply
			if lone {
				res = []reply{r}
				s.retryTryAgain(ctx, sa, res, func(int) bool { return true })
			} else {
				res = s.evalMulti(ctx, sa)
			}
			s.finish([]*call{c}, res[0])
		}()
	}
}

var argsPool = sync.Pool{New: func() any { return new(scriptArgs) }}

// takeLone decides c by lua/take.lua when it is a take of one request that
// the script handles, and reports whether it did. A lone call is what a
// serial caller sends: the general script's header and group parsing cost
// the server more than the decision.
func (s *Store) takeLone(ctx context.Context, c *call) bool {
	if c.op != opTake || len(c.reqs) != 1 || s.o.testNoLone {
		return false
	}
	q := &c.reqs[0]
	spec := s.loneSpecOf(q.Limit)
	if spec == "" {
		return false
	}
	sa := argsPool.Get().(*scriptArgs)
	sa.keys = append(sa.keys, q.Key)
	sa.args = append(sa.args, itoa(q.Cost), c.now, s.ttlFloor, spec)
	c.sent()
	r := s.evalAck(ctx, loneTake, sa.keys, sa.args, true)
	sa.reset()
	argsPool.Put(sa)

	if !c.claim() {
		return true // its caller left
	}
	c.res, c.err = decodeLone(r.RedisResult, q, &c.out[0])
	if c.err == nil && c.res.Allowed && r.unacked != nil {
		c.res, c.err = store.Result{}, fmt.Errorf("redis: take %q: %w", q.Key, r.unacked)
	}
	c.done()
	return true
}

// decodeLone reads lua/take.lua's reply (the time used, then the
// decision) into out; a refused take reports the request as if nothing
// had been charged, like decodeTake.
func decodeLone(r rueidis.RedisResult, q *store.Request, out *algo.Decision) (store.Result, error) {
	v, err := r.ToArray()
	if err != nil {
		return store.Result{}, callError("take", q.Key, err)
	}
	g := &groupReply{v: v, pos: 1}
	d, err := g.decision(q.Limit, nil)
	if err != nil {
		return store.Result{}, err
	}
	res := store.Result{Allowed: d.Allowed, At: g.int(0)}
	if !d.Allowed {
		d = store.Unwind(d, q.Cost)
	}
	*out = d
	return res, g.err
}

// finish decodes one script reply into its calls and wakes them. Under
// WithWait, the calls it admitted fail when the replicas did not
// acknowledge its writes; those it refused stand. A failed call's error
// names the caller's own key, not another caller's of the batch. A call
// whose caller left is skipped: its requests and decisions are its
// caller's again.
func (s *Store) finish(calls []*call, r reply) {
	v, err := r.ToArray()
	g := &groupReply{v: v}
	for _, c := range calls {
		if !c.claim() {
			if err == nil {
				// Its group: the header, then a decision per request.
				if _, _, e := g.header(); e == nil {
					_ = g.skip(5 * len(c.reqs))
				}
			}
			continue
		}
		if err != nil {
			c.err = callError("take", c.reqs[0].Key, err) // its own key, not another caller's
		} else {
			c.res, c.err = decodeTake(g, c.reqs, nil, c.out, nil)
			if c.err == nil && c.res.Allowed && r.unacked != nil {
				c.res, c.err = store.Result{}, fmt.Errorf("redis: take %q: %w", c.reqs[0].Key, r.unacked)
			}
		}
		c.done()
	}
}

// errNotState is wrapped by the errors of Inspect for a key whose value is
// not a state the scripts wrote (another program's key, a corrupt value).
// The error's own text names the key and what is wrong, for the caller;
// its cause, what a log shows (the server's store log names no key), is
// this text alone.
var errNotState = errors.New("not a floodgate state")

// notState is Inspect's error for key, whose value is not a state
// (detail: how not).
func notState(key, detail string) error {
	return fmt.Errorf("redis: inspect %q: %s: %w", key, detail, errNotState)
}

// decodeState turns the inspect script's reply into an algo.State.
func decodeState(key string, vals []string) (algo.State, bool, error) {
	bad := func(why string) (algo.State, bool, error) {
		return algo.State{}, false, notState(key, why)
	}
	if len(vals) == 0 {
		return bad("empty reply")
	}
	switch vals[0] {
	case "none":
		return algo.State{}, false, nil
	case "string":
		if len(vals) != 2 {
			return bad("malformed string reply")
		}
		return decodeString(key, vals[1])
	case "zset":
		return decodeZset(key, vals[1:])
	}
	return bad("unexpected key type " + vals[0])
}

// decodeString decodes a packed string state (see lua/prelude.lua): the
// kind, then little-endian doubles.
func decodeString(key, v string) (algo.State, bool, error) {
	if len(v) < 1+8 || (len(v)-1)%8 != 0 {
		return algo.State{}, false, notState(key, fmt.Sprintf("%d bytes", len(v)))
	}
	f := make([]float64, (len(v)-1)/8)
	for i := range f {
		f[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[1+8*i : 9+8*i])))
	}
	bad := func() (algo.State, bool, error) {
		return algo.State{}, false, notState(key, fmt.Sprintf("malformed state of kind %d (%d fields)", v[0], len(f)))
	}
	var st algo.State
	switch algo.Kind(v[0]) {
	case algo.FixedWindow, algo.TokenBucket, algo.GCRA, algo.Shaper:
		if len(f) != 3 {
			return bad()
		}
		st.A, st.B, st.C = int64(f[0]), int64(f[1]), int64(f[2])
	case algo.SmoothBursty, algo.SmoothWarmup:
		if len(f) != 3 {
			return bad()
		}
		st.A, st.B, st.C = int64(math.Float64bits(f[0])), int64(f[1]), int64(f[2])
	case algo.SlidingWindow:
		if len(f) < 3 {
			return bad()
		}
		st.A = int64(f[0])
		ring := f[1:]
		if len(ring) == 2 {
			st.B, st.C = int64(ring[0]), int64(ring[1])
		} else {
			st.Ext = make([]int64, len(ring))
			for i, x := range ring {
				st.Ext[i] = int64(x)
			}
		}
	default:
		return bad()
	}
	return st, true, nil
}

func decodeZset(key string, mv []string) (algo.State, bool, error) {
	var st algo.State
	if len(mv)%2 != 0 {
		return st, false, notState(key, "malformed sorted set reply")
	}
	for i := 0; i < len(mv); i += 2 {
		score, err := strconv.ParseFloat(mv[i+1], 64)
		if err != nil {
			return st, false, notState(key, fmt.Sprintf("bad score %q", mv[i+1]))
		}
		m := mv[i]
		if m == "~" {
			st.C = int64(score)
			continue
		}
		parts := strings.Split(m, ":")
		switch len(parts) {
		case 2: // sliding log: time:seq
			st.Ext = append(st.Ext, int64(score))
		case 3: // concurrency: lease:expiry:seq
			lease, err := strconv.ParseUint(parts[0], 10, 64)
			if err != nil {
				return st, false, notState(key, fmt.Sprintf("bad lease member %q", m))
			}
			st.Ext = append(st.Ext, int64(lease), int64(score))
		default:
			return st, false, notState(key, fmt.Sprintf("member %q", m))
		}
	}
	return st, true, nil
}
