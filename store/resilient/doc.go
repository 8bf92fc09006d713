// Package resilient wraps a store.Store so that a slow or failed store never
// stalls or breaks the caller: every call has a deadline, circuit breakers
// stop calling a store (or the part of it) that keeps failing, and a failure
// policy answers in its place. It also keeps a cache of keys known to be over their limit, so
// that requests for them cost no store call until the limit resets.
//
// # Failure policy
//
// When a call fails — an error from the store (store.ErrUnavailable, a
// network error), no answer within the timeout, or the breaker is open —
// the policy decides instead:
//
//   - FailOpen admits the request (Decision.Allowed, Remaining reported as
//     the capacity less the cost, as for a fresh key), unless its cost is
//     above the limit's MaxCost: that one can never pass whatever the
//     store holds, and is refused (RetryAfter algo.Never) as the store
//     would refuse it, with the rest of its Take.
//   - FailClosed refuses it, with RetryAfter the breaker's cool-down (what
//     remains of it while the breaker is open; the longest of the breakers
//     of the keys' partitions).
//   - FailLocal decides it on an in-process memory store whose limits are the
//     store's limits divided by the expected number of instances
//     (WithInstances): each limit L becomes max(1, ⌊L ÷ N⌋), and likewise the
//     burst of the bucket algorithms, the queue of the shaper and the
//     capacity of SmoothBursty (its stored permits plus the free ticket).
//   - FailUnavailable answers nothing: the Take or Peek fails at once with
//     an error wrapping store.ErrUnavailable (and the store's error, but
//     for a context's), for the caller to decide — a server answers gRPC
//     UNAVAILABLE or HTTP 503, and Envoy applies its failure_mode_deny.
//     The timeout and the breakers work as for the others: an open
//     breaker fails the call without a store call or a wait.
//
// Contention is no outage: a Take the store gave up on
// (store.ErrContention, memcached's compare-and-swap out of retries on a
// hot key) charged nothing and is refused, whatever the policy, with
// RetryAfter ContentionRetryAfter and nothing remaining; it counts as the
// store's answer for the breaker and is not kept in the over-limit cache.
// A policy answering for it would admit past the limit under FailOpen
// (every Take the store could not count) or refuse for a cool-down under
// FailClosed. Hooks.Call sees its error (store.ErrContention), and
// Hooks.Fallback is not called. A Peek's contention is answered by the
// policy, as an outage's. A call that met contention on one key and an
// outage on another (a multi-key Take over a live memcached server and a
// dead one) is an outage: the policy answers it, and the breakers count
// it as failed.
//
// A refusal is no outage either: a Take that the store refused while
// part of it failed (store.Result.Partial: a Redis Cluster key over its
// limit on a live node, or a memcached key on a live server, while
// another key's node or server is down) is refused, whatever
// the policy, with the store's decisions — the zero Decision, undecided,
// for the keys of the failed part — and Result.Partial; FailOpen would
// admit what a live key refused. The failure is counted by the breakers
// (against the partitions the store names) and seen by Hooks.Call as any
// other; Hooks.Fallback is not called.
//
// Bound of FailLocal: with N instances each enforcing max(1, ⌊L ÷ N⌋), the
// instances together admit at most N·max(1, ⌊L ÷ N⌋) per window during an
// outage — at most L when L ≥ N, and N otherwise. The local state starts
// empty, so a window that began on the shared store and ends on the local
// ones may admit what the store had already admitted plus the local share:
// at most 2L in any window that overlaps the outage (L + N when L < N). When
// the store comes back, decisions return to it and the local state is left
// to expire; the store has not seen the local admissions, so the window
// during which it returns may likewise admit up to 2L. Those bounds hold
// for a store that keeps its counts through the outage (a network
// partition, a pause, a restart from persistence); one that comes back
// empty (a Redis restarted without persistence) has forgotten what it
// admitted before too, and the window that spans the outage may admit up
// to 3L: what it admitted before, the local shares, and L afresh. A run
// with fewer instances than declared admits less (each keeps its share),
// never more.
//
// Release is not a decision, and no policy answers for it: when the store
// does not release the leases, Release returns an error wrapping
// store.ErrUnavailable (the slots stay held on the store until their lease
// TTL passes), after releasing them on the local store if FailLocal made
// one. Refund, by contrast, is lost quietly: its units come back when the
// key's state expires.
//
// Only an outage triggers the policy: an error wrapping
// store.ErrUnavailable, a network error, a deadline, a connection cut short
// (io.EOF), or the breaker open. Every other error is returned as it is:
// the caller's (store.ErrBadRequest, a context the caller cancelled,
// store.ErrClosed), counted for no breaker, and the deployment's, which
// last until someone changes something — a Redis user whose ACL does not
// cover the store's keys (NOPERM, redis.ErrPermission), another program's
// data under a key (WRONGTYPE) — counted as the store's answer (a
// half-open breaker whose probe meets one closes). A policy answering for
// those would hide them for good: FailOpen would admit every request.
//
// # Timeout and breaker
//
// Every call runs with its own deadline (WithTimeout, 50 ms by default),
// or 2 ms before the caller's when that comes sooner and leaves the store
// at least 5 ms (Envoy's rate limit filter gives a call 20 ms by default):
// a store that has not answered by then is slower than its callers can
// wait, the call counts as a timeout for the breaker, and the policy
// answers while the caller still listens; on a hung store the caller's
// deadline would otherwise end every call, counted for no breaker, and the
// policy never answer. A caller left less time keeps its deadline, whose
// passing, as a cancellation, counts for no breaker. The
// call runs on a goroutine of its own so that a store client that ignores
// its context still cannot hold the caller past the deadline; its late
// answer is discarded. A Take abandoned that way may still be charged by the
// store: the request is answered by the policy and the stray charge only
// ever refuses more, never admits more.
//
// A breaker opens after a number of consecutive failures (WithBreaker,
// 5 by default) and then sends nothing to the store for a cool-down (1 s by
// default). After the cool-down one call goes through as a probe while the
// others are still answered by the policy: its success closes the breaker,
// its failure opens it for another cool-down. Recovery after the store
// returns therefore takes at most one cool-down plus one call.
//
// A store whose keys live on several nodes that fail one at a time — a
// Redis Cluster's masters, a memcached ring's servers — says so by
// implementing store.Partitioner (the wrapped store or one down its Unwrap
// chain, such as store/lease or storeurl.OpenRetrying; a store opened in
// the background is looked for again after the first call that succeeds).
// The Store then keeps one breaker per partition: a call asks the breakers
// of its keys' partitions, and the failures of a dead node open the
// breakers of its partitions only, so that the keys of the live nodes are
// still decided by the store, and the successes of the live nodes do not
// reset the count of the dead one's failures. Redis partitions a Cluster
// into 64 ranges of 256 hash slots, memcached by server (see their
// Partitions methods). A call over keys of several partitions (a Take of a
// hierarchy) goes to the store only when every one of their breakers lets
// it, and is answered by the policy otherwise; but a Take's keys whose
// breakers are closed are first looked at (a Peek; not under FailClosed,
// which refuses anyway), and one the store refuses refuses the take, as
// when the store refuses it while part of it fails (Result.Partial, not
// Fallback, the other keys undecided; Hooks.Fallback is not called). Its
// success counts for each of them. Its failure counts against the partitions the store names
// as failed (a *store.PartitionError, which store/redis and
// store/memcached return when they can tell: the nodes whose part, or
// roll-back, failed), as a success for the others whose part ran, and for
// neither those it did not reach: a hierarchy's shared key on a live node
// keeps its breaker closed while the users' keys of a dead node fail. A
// failure the store does not place counts against each partition of the
// call, as it did before the stores named them: counting it for none
// would keep a dead node's breaker closed under a load of multi-key calls,
// each waiting out the timeout. A call over several partitions that the
// deadline cuts short is answered by the policy at the deadline, and
// counted when the store answers: a Redis Cluster's client gives up at the
// same deadline and names the slot ranges that did not answer, a
// memcached server that is down fails on its own round-trip timeout. A
// late success counts for none (some node was slow, not which). A store
// that has not answered within a late grace after the deadline (the
// timeout again, at least 100 ms and at most 1 s) is counted as failed on
// each partition of the call; and a call that makes the unanswered late
// calls of one of its partitions more than the breaker's threshold of
// failures is counted as failed on each such partition at once, its
// answer ignored: a store client that ignores its context opens the
// breakers of the partitions it holds calls on within about twice the
// threshold of late calls, as when every timeout counted at the deadline,
// rather than leaving a call and a goroutine stuck on it per caller and
// timeout. Such a store cannot say which node held a call, so a shared key
// on a live node is blamed with the rest. The cost per call is one atomic
// load and, for a Partitioner, its Partition of each key (a hash; no lock,
// map or allocation); nothing for a store of one partition.
//
// Breaker reports the worst state of the breakers (open, then half-open,
// then closed), Breakers each one. Hooks.State follows the worst state,
// Hooks.PartitionState each breaker with the number open, and
// Hooks.Tripped and CircuitOpenError name the partition that opened
// (CircuitOpenError.Partition: "slots 5376-5631", "server 10.0.0.8:11211").
//
// # Over-limit cache
//
// When the store refuses a key (for any algorithm but Concurrency, whose
// slots come back at any time) the refusal and its RetryAfter are kept: a
// later Take of that key with the same cost (under a fixed window, any
// cost up to the limit: it refuses until the window's end whatever the
// cost) is refused from the cache, with the store's RetryAfter counted
// down, without a store call, until RetryAfter has passed or the refusal
// is older than WithOverLimitCacheTTL (1 s by default), whichever comes
// first; the store is then asked again. A larger cost goes to the store,
// whose RetryAfter for it is longer (a token bucket's by the time the
// extra tokens take). A refusal dated after the clock's now (the wall
// clock stepped back) is dropped. Other requests can only push the retry later, so the
// cache never admits what the store would refuse; it refuses for up to the
// TTL more than needed when another instance resets the key or refunds
// units (Reset and Refund drop the keys they touch here, not on the other
// instances). The TTL is what makes an admin reset fleet-wide within a
// second, even for a calendar quota refused until next month; a key far
// over its limit costs each instance one store call per TTL. The cache
// holds at most WithOverLimitCache keys (100 000 by default).
//
// A multi-key Take (the descriptors of a request, a hierarchy) is answered
// from the cache only when it holds a refusal of every key: the cache
// cannot say what remains of a key it does not hold, so a Take with one
// goes to the store, which refuses it charging nothing and reports each
// key's true Remaining (one store call, as without the cache). A cached
// key that the store then admits (another instance reset it) leaves the
// cache. When the store cannot answer such a Take, the cached keys still
// refuse it, whatever the failure policy (a larger cost than the cached
// one too, with the cached RetryAfter, then a lower bound): they report their cached
// refusal, the other keys what the policy reports for them with nothing
// charged (FailOpen: a fresh key's capacity), and Result.Fallback is set.
//
// # Clock and concurrency
//
// A Store is safe for concurrent use. It reads the time from WithClock
// (time.Now by default) for the cache and the breakers' cool-down; the
// decisions themselves keep the wrapped store's clock. The package uses only
// the standard library and the core Floodgate packages.
package resilient
