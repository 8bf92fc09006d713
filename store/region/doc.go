// Package region enforces one limit across several regions, each of which
// decides on its own store (a Redis, a Redis Cluster, a Memcached ring in
// that region), and lends its unused budget to the others.
//
// # Shares
//
// Each limit is divided among the regions by weight (WithWeights; equal by
// default): a region with weight w of a total W gets w/W of the limit's
// Limit, and of the token bucket's and GCRA's Burst and InitialTokens,
// and of the shaper's queue and Delay. The parts are whole units, given by
// the largest remainder (ties to the region whose name sorts first), so
// that they add up to the limit exactly: 10 over three equal regions is
// 4, 3 and 3; 2 over three regions is 1, 1 and 0. Every region computes
// the same parts from the same names and weights, so every region must be
// configured with the same list of regions and the same weights.
//
// A region decides every request on its share in its own store first: the
// usual answer costs no call to another region.
//
// # Borrowing
//
// When its share refuses a request, a region borrows: it takes the
// request's cost from a peer region's store, at the peer's share, trying
// the peers in turn (from one chosen by the key, so that the keys spread
// over the peers and each key borrows from one peer while it lends) until
// one admits it. The peer's own traffic and every other borrower are charged
// on that same store under the same share, so each admitted unit is
// charged once, on one region's share, before it is admitted; the shares
// add up to the limit, so the regions together admit no more than the
// limit would on one store: the worst-case overshoot is zero. (A share of
// nothing — a limit smaller than the regions — makes the region borrow
// every request.) Borrowing covers the algorithms whose admissions are
// plain counts: fixed window, sliding window, sliding log, token bucket and
// GCRA. A Take of several requests at once (a hierarchy) borrows them all
// from one peer, as one all-or-nothing acquisition there.
//
// A peer that answers from a failure policy (a peer store wrapped in
// store/resilient, which charged nothing) lends nothing: it is treated as
// failing. Give peers their stores as opened, without a failure policy.
//
// With WithSlice(n), a region borrows n units at a time and admits later
// requests from them in process (store/lease): one cross-region call per
// n units borrowed, not one per request. A unit is then charged on the
// lender up to the slice TTL before it is admitted, so a window may admit
// units charged in the one before: with P processes in all the regions
// and R regions, any window or interval admits at most P·(R−1)·n units
// beyond the limit — the configured worst-case overshoot. A budget that
// does not refill (a quota) is never exceeded. The slice's unused units go
// back to the lender when the TTL ends; until then only the borrowing
// process admits from them, so the lender may refuse, per key and
// borrowing process, up to a slice of units it would otherwise have
// admitted (an under-admission): keep n well below the peers' shares. Slices follow store/lease: the
// sliding log, which keeps each request's time, and Takes of several
// requests at once are borrowed one call each.
//
// With WithPrefetch too, the borrowing is asynchronous: when a decision
// leaves this region's share of a key fewer units than a slice, a
// goroutine borrows a slice then (at most 64 at once, one per key), and
// the Takes the share refuses next are admitted from it in process; the
// Take that uses a slice's last unit starts the next slice's borrowing in
// the same way. A Take waits on another region only when it comes while
// a slice is being borrowed (store/lease holds the key across that call)
// or when borrowing falls behind. The bound is the slices'; a slice
// borrowed ahead and not needed goes back when its TTL ends.
//
// # What it costs
//
// A decision on the share is one call to this region's store, as without
// regions (BenchmarkRegionTake: within the noise of the store alone). A
// borrowed one is a call to the peer's store, across regions: once this
// region's share of a key has refused, the Store remembers it until that
// refusal's RetryAfter (a second at most; a Refund or Reset through it
// forgets it at once) and sends the key's Takes straight to the peers,
// one call instead of two; with WithSlice they are answered in process
// from the borrowed slice (store.LocalTaker), with no call at all, until
// it runs out. Remembering never admits more: it only sends to the peers
// a Take this region's store would have refused; at worst a unit
// refunded here through another instance waits that second.
//
// # A peer that fails
//
// Borrowing from all peers together is bounded by the timeout
// (WithTimeout), and ends before the caller's deadline (a tenth of the time
// left before it), so that a failure policy above never answers for a
// borrowing cut short. A peer that fails or does not answer in time is left out
// for the backoff (WithBackoff) and tried again after it, and probed in the
// background meanwhile (every second at most), lending again as soon as a
// probe answers; Stats reports it Down until a call answers. Meanwhile the
// region limits on its own share alone, exactly, and its answers wait for
// no other region. Failures only ever refuse what a peer could have lent:
// they never admit more. A region's own store failing is Take's error, as
// for any store (store/resilient's failure policy goes above a Store).
//
// A request whose cost is larger than this region's share and every
// peer's, though within the whole limit, is refused as never
// (algo.Never): no single share can take it, and borrowing takes a cost
// from one share. Keep costs within the smallest share.
//
// # Not borrowed, and other limits
//
// Concurrency slots, the shaper and the Smooth algorithms keep to their
// shares: a slot must be released where it was taken, and the shaper's
// and the Smooth algorithms' delays depend on one queue. Their shares add
// up to the limit, with two bounds to know: the shaper's queue and the
// Smooth algorithms' free ticket are per region, so at once the regions
// admit up to R−1 units beyond a single store's burst; and a region whose
// slots are all held refuses while another region has free ones.
//
// A Refund of an admission a peer lent (the Request's Key and At, as
// Take's Result gave them) goes back to that peer's share (or to the
// slice held here), where it was charged: the Store remembers the last
// 65,536 borrowed admissions for that. A lender that is left out, fails or
// is late (within the timeout) keeps the units until its window passes or
// it refills, and its failure is not the Refund's error: a failure policy
// above never answers for this region because a peer is down. Any other
// Refund goes to this
// region's own store; a borrowed admission forgotten by then frees a unit
// here, if any (for a sliding log stamped by the lender's clock, or a
// window the lender's At is outside of, nothing: fewer admitted, never
// more). Release and
// Renew go to this region's store, where every slot is held. Reset forgets
// the keys in every region.
//
// Decisions report the whole limit as their Limit (its capacity, as
// configured), and as Remaining what the share that decided (this
// region's, or the lender's for a borrowed admission) has left: a lower
// bound, since the peers may lend more. Peek answers what Take would: the
// share's decision, or, when the share would refuse, that of a peer that
// would lend, a slice already borrowed from it counted (within the
// timeout).
//
// Every region must be given the same regions and weights: each computes
// the shares, its own and the peers', from its own list, and shares
// computed from different lists need not add up to the limit (with
// us=2,eu=1 in one region and equal weights in the other, 10 becomes 7
// and 5, 12 in all). Change weights in every region together; while some
// regions run the old list and some the new one, a window may admit the
// difference between the two lists' shares beyond the limit.
//
// Each region's store keeps its own clock (a Redis's TIME): fixed windows
// start when each region's clock says, so regions whose clocks disagree
// by d shift their windows by d against each other.
package region
