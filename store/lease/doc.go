// Package lease serves decisions from slices of a limit's budget taken
// ahead from a shared store: local token leases.
//
// A Store wraps a shared store (Redis, Redis Cluster, Memcached, or any
// store.Store). The first request on a key takes a slice of units (the
// Slice option, say 10) from the shared store in one call, admits itself
// from it and keeps the rest; the following requests on that key are
// admitted from the slice in process, with no round trip, until it runs
// out or its time to live ends. An instance then makes about one store call
// per Slice admitted units instead of one per request: the way to serve
// more decisions per second than one Redis shard executes, for keys hot
// enough to use a slice before it expires.
//
// # The trade, bounded
//
// Every unit admitted was first charged to the shared store, so leases
// never create budget: over the life of a limit, admitted ≤ charged. What
// they change is when a unit is charged: up to TTL before it is used. With
// K instances:
//
//   - Over-admission in time: a unit charged in one window (or before an
//     interval of a bucket) may be admitted in the next, so any window or
//     interval admits at most K × Slice units beyond its limit. A budget that
//     does not refill (a quota) is never exceeded.
//   - Under-admission: each instance holds at most Slice − 1 unused units of a
//     key; other instances cannot use them until they are given back. Units
//     left when a slice expires (TTL) or the Store is closed go back to the
//     shared store (store.Store.Refund, at the time they were charged, so a
//     window that has passed takes nothing back). A give-back that fails
//     loses its units until their window ends (or they refill); so does
//     one that a request's context cuts short: a request that finds its
//     key's slice expired (or too small for it, or under another limit)
//     gives the units back first, within its own context (deadline or
//     cancellation), and returns the context's error if that ends first.
//     The Store's janitor, which gives expired slices back every half TTL
//     (10 ms at least), ends its round at such a failure and leaves the
//     slices it has not reached, with their units, to its next round an
//     interval later: a shared store that does not answer costs a round
//     one store timeout, not one per expired key. When the shared store
//     has fewer units left than a slice, a Store takes what is left (a
//     smaller slice), and once nothing is left only what each request
//     needs: units that refill go one request at a time.
//   - Headers: Remaining is the shared store's figure at the slice's take
//     plus the units this instance still holds; ResetAfter is the one
//     reported when the slice was taken.
//
// A refusal is always the shared store's own, for the request's own cost,
// with its exact RetryAfter; until that RetryAfter has passed, and for the
// TTL at most, requests on the key that need as much or more are refused
// in process, from that decision (its RetryAfter counting down), without a
// round trip, except a cost beyond the capacity, which gets the shared
// store's "never" (algo.Never) rather than a smaller cost's wait. A Refund
// through this Store ends it at once; units the shared store has again
// without this Store knowing (another instance's given back, a key reset
// through another instance) are found within the TTL.
//
// # What is leased
//
// Single-request Takes of the token bucket, GCRA, fixed window and sliding
// window with a cost of at least 1 and at most Slice. Everything else goes
// to the shared store unchanged: several requests at once (all-or-nothing
// acquisitions, hierarchies), zero-cost Takes, concurrency leases, the
// shaper and the Smooth algorithms (whose admitted requests carry a delay
// that depends on when they arrive) and the sliding log (which keeps each
// request's own time).
//
// # Where it goes
//
// Directly above the shared store, under any wrapper that answers for the
// store when it cannot be reached (store/resilient's failure policy): such
// an answer charged nothing, and units taken from it would be given back
// to the store later as budget it never had. A store error reaches the
// caller unchanged; the slice's units stay usable meanwhile.
//
// # Concurrency and clock
//
// Decisions on one key are serialised in process by the key's lock, held
// across the store call that refills the slice (and the give-back before
// it), so concurrent requests on an empty slice cause one store call, not
// one each; both calls end with the request's context, so that a shared
// store that hangs holds a key no longer than the request on it waits. A
// request waiting for the lock gives up when its context is done (a
// Refund of several requests still gives back what it did before it gave
// up, and its error names the keys it did not refund). Slices expire by
// the process's monotonic clock (injectable with WithClock for tests).
package lease
