// Package redis is Floodgate's Redis store: every algorithm of package algo
// as a Lua script that runs next to the data, on a standalone server, a
// Sentinel-managed master or a Redis Cluster.
//
// Open takes a store URL (redis://, rediss://, redis-sentinel://,
// redis-cluster://; see ParseURL) and returns a *Store that implements
// store.Store and store.Inspector. The client is github.com/redis/rueidis,
// chosen over go-redis on measurements of this store's pattern (docs/BENCHMARKS.md).
//
// # Scripts
//
// The files in lua/ port algo's functions line for line: integers stay
// below 2^53 where Lua's doubles are exact, division and modulo are made
// exact, and float formulas run in Go's order, so a script decides exactly
// what algo decides on the same trace (the differential test holds this
// for every algorithm and every path). They are assembled into a few
// scripts, all loaded on every node when the store opens and called by
// EVALSHA: one per algorithm family and one holding them all, plus a flat
// script for batches of single-key takes of fixed windows, token buckets,
// GCRA and shapers, and a smaller one still for such a take sent alone
// (what a serial caller sends).
// Redis runs a script's whole body on every call, so the assembled scripts
// create an algorithm's functions only when a call uses it, and the flat
// ones define nothing per call. A NOSCRIPT reply (a restart, a failover to
// a node that never saw the script) is answered by EVAL, which also caches
// the script there; the calls of a batch that met it are sent again in one
// pipeline, the script's EVAL first and the others' EVALSHA behind it.
//
// # Clock
//
// A script reads the Redis server's TIME (µs), never the caller's clock, so
// instances whose clocks disagree make the same decisions; only
// WithTestClock, for tests, passes an explicit time instead. Result.At is
// the server time of the decision. A server clock that steps back is
// treated like algo treats it: state time never moves backwards. The
// later slots of a Cluster's cross-slot Take are decided at the first
// slot's server time; a node whose clock is behind it counts those keys'
// TTLs from its own TIME, so that a key lasts until that node's clock
// reaches the state's expiry.
//
// # Keys
//
// Fixed window, sliding window, token bucket, GCRA, shaper and the smooth
// algorithms keep a short string ("kind A B C"); the sliding log and the
// concurrency limit keep a sorted set bounded by the limit (one member per
// unit or held slot, plus one member recording the latest time seen).
// Every write sets PEXPIRE from algo's ExpiresAt, so idle keys vanish on
// their own, and a key whose state has expired reads as fresh even before
// Redis removes it.
//
// # All or nothing
//
// Take charges every request or none. Requests whose keys share a hash
// slot (always, outside a Cluster; on a Cluster, keys with one hash tag
// such as "{tenant42}:user7") are decided by one script run, which is
// atomic. On a Cluster, requests in several slots are reserved with one
// script call per slot at one common server time, so that a Refund at
// Result.At finds the charges: the first slot's call at its node's TIME,
// then the others', pipelined, at the time it decided at. A key whose
// state has seen a later time (another take of it in between, or a node
// whose clock is ahead) is stamped at that time: a sliding log's Refund
// still finds its units (the oldest stamped at or after Result.At, within
// its Period: see algo.Limit.Refund), a window's in the same window; a
// window's stamped past its end, or a sliding window's in a later
// sub-window, are not given back (refusing, never admitting). When any slot
// refuses, the admitted slots are rolled back in reverse order (the
// rollback undoes exactly the reserved units, including a concurrency
// reservation's lease slots; a smooth algorithm's state, whose refund
// does not give back stored permits, goes back to what the reservation
// found unless a take changed it in between, and is refunded then).
// Between reservation and rollback other
// callers may be refused by the reservation: the error is toward refusing,
// never toward admitting. If the rollback itself cannot reach Redis (the
// connection dies in between), Take returns an error wrapping
// store.ErrUnavailable and the reserved charge stays until it lapses by
// the algorithm's own rules, which are the key's TTL: at most one window
// for the fixed window, one period for the sliding log, one period and one
// sub-window for the sliding window, cost ÷ rate for the buckets and GCRA,
// cost × the stable interval plus the time to refill the stored permits
// (MaxBurstSeconds, or the warm-up period) for the smooth algorithms, and
// LeaseTTL for a concurrency reservation.
//
// A slot that refuses decides even when another slot's node fails (or a
// roll-back does): the Take is refused, with the failure as its error (a
// *store.PartitionError) and Result.Partial set, its failed slots'
// requests undecided (the zero Decision). When the first slot's
// reservation fails, the others are looked at (a peek, charging nothing)
// for a key that refuses; when the first slot refuses, the others are
// only looked at too. store/resilient answers such a Take as the refusal
// it is, whatever its failure policy.
//
// # Throughput
//
// Concurrent single-slot Takes are coalesced (flat combining): a caller
// that finds the store idle sends its decision at once from its own
// goroutine; callers that arrive while batches are in flight queue, and
// the next sender takes up to WithBatchSize of them into one script call
// (one on a Cluster per hash slot, pipelined), so one round trip and one
// script run decide many keys. WithBatchWindow trades latency for larger
// batches; WithInflightBatches bounds the batches in flight. On a Cluster
// each range of 256 hash slots (a partition, see Partition) has a batcher
// of its own, with its own batches in flight, so that a master that hangs
// holds up its own ranges' calls only. Calls are
// pooled, so a busy store does not allocate per decision beyond the
// client's command buffers.
//
// # Redis versions
//
// The scripts need Redis 5 or later (scripts that read TIME and then write
// rely on effects replication, the default since 5.0); they are tested on
// Redis 7.0.
//
// # Failures
//
// Errors wrap store.ErrUnavailable (connection, timeout, failover in
// progress), store.ErrBadRequest or store.ErrClosed. A server error reply
// wraps store.ErrUnavailable only when it passes by itself (LOADING,
// BUSY, MASTERDOWN, READONLY, TRYAGAIN, OOM, …). One that lasts until the
// deployment changes is not an outage, so that no failure policy answers
// for it (failing open, a policy would hide it): a key or command the
// user's ACL does not allow (NOPERM) and a password the server no longer
// takes (WRONGPASS) wrap ErrPermission, as does Open's error for a
// server that refused the TLS connection for want of a client
// certificate (tls-auth-clients yes); WRONGTYPE, CROSSSLOT and an
// unknown command wrap no sentinel of package store. Each error says what
// to change (replyerr.go holds the table of decisions). A reply that is
// not the command's (a script reply too short or of another type, a bad
// TIME reply), the sign of a broken connection or proxy, wraps
// store.ErrUnavailable. A script call that fails may or may not have run:
// the store never retries it, so a failure can under-admit (a charge
// without a decision) but never over-admit; it sends again only calls
// that Redis refused before the script ran (TRYAGAIN below, and a
// coalesced batch the ACL refuses for one caller's key: NOPERM for a key
// the call declares, checked before the script runs, is followed by each
// caller's call alone, so that each gets its own verdict and a caller
// whose key the user may reach is decided, charged once). On
// a Cluster failover the client follows MOVED replies and refreshes its
// slot map, and under Sentinel it asks the sentinels for the new master;
// decisions fail (store.ErrUnavailable) until the replica is promoted. Redis
// replicates asynchronously, so charges acknowledged by a master in the
// last moments before it dies may be lost with it, and a key may then
// admit that many units more than its budget. WithWait (the URL's
// wait_replicas) follows every write with WAIT and turns a decision whose
// writes the replicas did not acknowledge into an error (*AckError,
// store.ErrUnavailable) for the failure policy: see docs/STORES.md
// (Persistence) for what it guarantees in a failover.
//
// A server at its maxmemory under the noeviction policy refuses every take
// with its OOM error (store.ErrUnavailable) before the script has changed
// anything: Redis checks memory only at a script's first write, and each
// take's first write is one it checks (SET, or ZADD for the sorted sets,
// which count before they trim). Peeks, concurrency releases and renewals,
// and resets, which add nothing, still run.
//
// While a Cluster moves a hash slot (redis-cli --cluster reshard or
// rebalance), the client follows ASK and MOVED to the key's node, and a
// script over keys of the slot that are on both sides for the moment is
// refused with TRYAGAIN before it runs. Coalesced batches refused so are
// split into their callers' calls, so that a decision over one key never
// fails for a migration; a call whose own keys are apart (two hash-tagged
// keys of an all-or-nothing take) is sent again, from 2 ms apart up to
// 50 ms apart, within its context and the store's timeout, and fails with
// the TRYAGAIN error (store.ErrUnavailable) when its keys are still apart
// then. Nothing is charged twice: TRYAGAIN means the script did not run.
package redis
