// Package memcached is a store.Store on memcached, for teams that already
// run it. Memcached has atomic counters and compare-and-swap but no
// transactions, scripts or clock, and this store is built from exactly
// those pieces; where that costs something, the cost is stated here.
//
//	st, err := memcached.Open("memcached://10.0.0.1:11211,10.0.0.2:11211")
//
// # Algorithms and how each is kept
//
// Every algorithm of the algo package is supported, with the algo package's
// own math, so decisions match the memory store's on the same trace.
//
// Fixed window and sliding window (both the two-window estimate and N
// sub-windows) are decimal counters, one per window or sub-window, charged
// by incr-then-check: incr adds the cost and returns the new count, the
// algo function decides on the count as it was before, and a refusal gives
// the cost back with decr. A refused request therefore never stays
// charged, and a counter only ever over-states the admitted units (by
// refusals not yet given back), so the store never admits more than the
// pure algorithm; with unit costs it admits exactly as many (a large
// refused cost may, for the instant before its decr, make a small request
// refuse). When that decr fails (the server failing between the two
// round trips), the refusal stands: Take returns the failure with
// store.Result.Partial and the refused decision, the cost staying counted
// until the window ends (under-admission, never over-admission). A
// fixed-window decision is one round trip (two when it refuses
// or creates the window); a sliding window adds one GetMulti for the older
// sub-windows, which live on the same server.
//
// Token bucket, GCRA, shaper, smooth bursty, smooth warm-up, sliding log and
// concurrency keep their algo.State (State.MarshalBinary behind a byte
// naming the algorithm and the state's ExpiresAt) in one item, updated by
// gets/cas optimistic concurrency: read the state and its CAS id, decide,
// and write back only if nobody wrote in between; otherwise re-read and
// decide again after a jittered exponential backoff (WithBackoff), at most
// WithRetries times. When the retries run out the operation fails with an
// error wrapping store.ErrContention and nothing charged: the caller's
// failure policy (fail open, closed, or local) decides, never a silent
// over-admission. A refusal also stores what the algorithm's Take left (a
// fresh bucket's clock starts), but with one attempt only, since it charges
// nothing; a server failing on that write leaves the refusal as it is,
// without an error. Within one process, callers of the same key queue on a local
// lock (4096 stripes) instead of racing, so retries are only spent against
// other processes; Stats reports them (CAS retries per decision). A sliding
// log state grows by 8 bytes per unit held, a concurrency state by 9 to 18
// (a slot's expiry and its lease id); one larger than the item size limit
// (the smallest of WithMaxItemSize and the servers' -I, 1 MiB by default:
// a sliding log of about 131 000 units, 58 000 to 116 000 concurrency
// slots) is refused with store.ErrBadRequest, whether the store or the
// server finds it too large: no failure policy admits it. Store.MaxStateSize
// gives the largest item a limit's state can take, and Store.MaxItemSize
// the limit the store keeps to, so that a rule that would meet that error
// can be found before its first decision (floodgate serve warns of each).
//
// The servers must keep compare-and-swap on: Open refuses a server started
// with -C, and one restarted with -C later fails those algorithms with an
// error naming -C (store.ErrUnavailable).
//
// As in every store, a state whose ExpiresAt has passed on the store's
// clock reads as fresh, whether or not memcached has dropped it yet.
//
// # All or nothing over several keys
//
// Take charges every key and, when one refuses, undoes those charged: a
// compare-and-swap state
// that still holds what the Take wrote is put back as it was, one that
// another caller changed since is given algo.Limit.Refund (for
// concurrency, the slots just taken are removed), and a window counter is
// decremented. In between, another caller may find those units taken:
// all-or-nothing can make a concurrent request refuse, never admit too
// much. Such a refusal is reported on the request that met it, which keeps
// its refused decision in out even if, looked at again after the roll-back,
// it would pass. A roll-back that fails (the server is gone) is returned as an
// error: the units stay charged until they expire. So may the keys of a
// step whose connection failed part way (a timeout, a server closing it):
// the commands sent after the last reply read may or may not have run, so
// they are neither counted as charged nor given back, and the Take fails.
// That is at most the keys of one server's step, never an over-admission.
// A Take that a live server refused while another server failed (or a
// roll-back did) is refused all the same: it returns the failure (a
// *store.PartitionError) with store.Result.Partial, the refusing
// request's decision, what each request the live servers admitted alone
// would get (its charge rolled back), and the zero Decision for the
// requests not decided, so that store/resilient answers it as the
// refusal it is rather than by its failure policy (failing open, that
// admitted what the live key refused).
//
// A Take of several keys costs a few round trips per server whatever the
// number of keys: its commands are pipelined, each step's commands for a
// server written at once on one connection and their replies read in
// order, the servers concurrently. Admitting is one step for window
// counters (a counter is created by an add of 0 pipelined before its
// incr) and two for compare-and-swap states (gets, then cas or add); a
// refusal adds the roll-back and the decisions alone (up to four more);
// a lost compare-and-swap adds two per retry. The requests of one key in
// a Take are decided in order, each on what the previous one left, as
// successive Takes would. (Before, the keys went one round trip after the
// other: a request with a thousand descriptors outlasted the store
// timeout and was answered by the failure policy.) A Peek of several
// keys reads them all with one GetMulti per server, one round trip each;
// a Refund of several decrements its window counters in one step and
// refunds its compare-and-swap states in two (gets, then cas), a lost
// compare-and-swap adding two per retry as for Take: a cas lands once or
// not at all, so a refund is neither lost nor applied twice. Release and
// Renew still go key after key; a server that fails fails its own keys
// only, and the other servers' leases are released or renewed all the
// same.
//
// # Clock
//
// Memcached has no time command, so decisions use the caller's clock
// (WithClock, default time.Now), read once per Take; a Take of one key
// kept under compare-and-swap reads it again after each read of the item,
// so that the time it decides at (Result.At) is not before the time the
// state has seen, which the algorithm would decide at instead (a sliding
// log stamps its units with it, and a Refund at Result.At finds them).
// A multi-key Take decides every key at the time read once: a sliding
// log's unit it stamps later, after a concurrent take of the key, is found
// by a Refund at Result.At within the log's Period, which removes the
// oldest units stamped at or after that time (see algo.Limit.Refund:
// another take's, if so, no later than its own, never more capacity).
// Instances sharing the servers should keep their clocks within
// WithClockSkew (default 1s; NTP keeps them within milliseconds). What a
// skew of δ costs:
//
//   - fixed window: instances disagree about which window is current for δ
//     after each boundary. A fast instance starts counting the next window
//     early and a slow one keeps counting the old one, so a real window
//     span may see up to Limit plus what the others admit in those δ
//     (never more than 2 × Limit, the bound a fixed window already has
//     across a boundary);
//   - sliding window: the same shift of δ in the weights, at most one
//     sub-window's count of extra error;
//   - bucket algorithms (token bucket, GCRA, shaper, smooth): the state's
//     time never moves backwards, so a slow clock never refills twice; a
//     fast clock refills early, up to δ × rate extra units;
//   - sliding log and concurrency: entries age out up to δ early or late;
//     a sliding log's take by the instance behind, within δ after one by
//     the instance ahead, stamps its units with the latter's time; its
//     refund (at its own time) finds them within the log's Period.
//
// The skew tolerance is also added to every expiry so that a slow
// instance never finds a counter it still uses already expired.
//
// # Expiry
//
// Every item expires when the algorithm says its state is as good as new,
// or has been full for the limit's Retain when a fresh state is not full
// (algo.Limit.ExpiresAt), rounded up to the second, plus the skew tolerance
// and one second for memcached's one-second clock. Memcached reads an
// expiration over 30 days as an absolute Unix time (calendar-year quotas
// need that): it is then computed from the machine's wall clock.
//
// # Servers
//
// Keys are spread over the servers of the URL by a ketama consistent-hash
// ring (libketama's points), so adding or removing a server moves about 1/n
// of the keys rather than nearly all of them, as gomemcache's own crc32-mod-n
// selector would. A moved key starts afresh on its new server. Memcached may
// evict items under memory pressure; an evicted key also starts afresh, so
// give the servers enough memory (-m) for the keys in use.
//
// The ring hashes each server as the URL writes it, host:port with the
// port in decimal without leading zeros (021211 is 21211; a sign or a
// space is refused, and one server written both ways is refused as listed
// twice):
// write the hosts alike on every instance. A host name is dialed by name:
// Open checks that it resolves, and every connection, reconnections after
// a restart included, resolves it again, so a server that comes back on
// another address (a Kubernetes pod) is found there without restarting
// Floodgate; a name that no longer resolves fails that server's keys
// (store.ErrUnavailable, the name in the error).
//
// Open fails when a server does not answer its check. With
// WithPartialStart (storeurl.OpenRetrying, floodgate serve
// --start-degraded) it opens as soon as one does: the ring keeps every
// server of the URL, so no key moves, and the keys of a server that did
// not answer (Unanswered) fail as a dead server's do while running, until
// it answers.
//
// memcacheds:// speaks TLS to every server (memcached -Z, AWS
// ElastiCache's in-transit encryption), each certificate verified against
// the system roots and the server's host as the URL writes it; WithTLS
// gives other roots, a client certificate or a server name. The ring is
// the same as memcached://'s for the same servers. Over TLS a pipelined
// step writes one command at a time (one TLS record each), since
// memcached 1.6.18 stalls on a record that holds the end of one command
// and the start of the next (see writeCmds in pipe.go).
//
// Window counters are named after their window's start, which depends on
// the limit, and memcached cannot list keys: Reset and Inspect, given a key
// alone, find the counters of the window limits this Store has used since
// it started, and miss those written only under other instances' limits.
// ResetRequests and InspectRequest (store.RequestInspector), given the
// key's limit, reach them whatever this Store has used; the server's admin
// API calls them with the limit named in the key.
//
// Contexts are checked before each round trip and during backoff; a round
// trip in flight is bounded by WithTimeout, since the client (gomemcache)
// takes no context.
package memcached
