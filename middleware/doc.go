// Package middleware limits net/http handlers with Floodgate's rules: it maps
// each request to descriptors (package dimension: client IP behind trusted
// proxies, API key, user and tenant, route, method, headers, query), asks a
// policy.Decider (the policy Engine on any store) for a decision, writes the
// rate limit header fields (package headers) and applies the matched rule's
// strategy on excess.
//
// # Entry points
//
//   - [New] returns a [*Middleware] for one domain of the rules. Its
//     [Middleware.Handler] has the func(http.Handler) http.Handler shape that
//     net/http, chi's Use and most routers take.
//   - [ForLimiter] returns one for a single limiter.Limiter and a [Key]
//     ([ClientIPKey], [KeyFunc], [KeyOf]), without rules or descriptors:
//     one decision per request on the request's key, the same header
//     fields, refusal and errors as New's for a rule of the same name and
//     parameters. A request without a key passes untouched.
//   - [Middleware.Check] is the decision without the wrapping, for adapters
//     (the gin adapter in middleware/ginlimit, the gateway): it writes the
//     header fields and, on refusal, the response, and returns a release
//     func to call when the request is done.
//
// A Middleware is made by New or ForLimiter: a zero Middleware{} has
// nothing to limit by, and Handler (and ginlimit.New) refuse it at once,
// Check and CheckAdmitted when called, panicking with a message that says
// so, as they do a nil *Middleware (an unchecked error of New).
//
// # Checked at construction
//
// When the Decider has a configuration (a *policy.Engine), [New] refuses
// what would let requests through unlimited without a word: a domain the
// configuration lacks, a descriptor of the Extractor that no rule of the
// domain can limit (a misspelt key, a header's name where the rules say
// api_key, entries in another order than the rules nest them; see
// [Limited]), a degrade rule whose fallback is not registered. Each error
// says what and where. [WithDescriptorCheck](false) accepts an Extractor
// its domain limits only in part, e.g. one shared by several domains.
//
// # What a request gets
//
// A request that produces no descriptor, or whose descriptors match no rule,
// passes untouched: no store call, no header. Otherwise every limited
// response carries the fields of the limits that applied (RateLimit-Policy
// and RateLimit per draft-ietf-httpapi-ratelimit-headers-10, X-RateLimit-*
// of the tightest one, Retry-After on a refusal), selectable and renameable with
// [WithHeaders]. The values come from the store's decision, so every
// instance sharing a store reports the same numbers for the same key.
// A cost in bytes ([WithCost] with [WithCostUnit]) is stated as such:
// qu="content-bytes" on the limits counted in it.
//
// Middlewares nest: one inside another (a per-route limit inside a
// per-IP one, each New's or ForLimiter's) adds its members to the
// RateLimit-Policy and RateLimit lists the outer one wrote, so that the
// client sees every limit that applied. X-RateLimit-*, which describe
// one limit, state the tighter of the two (fewer remaining, on a tie the
// later reset) when both count in the same unit — requests, bytes
// ([WithCostUnit]) or concurrent requests, as the outer RateLimit-Policy
// list states it (requests when there is none; unknown when the header
// set leaves the IETF fields out, as no list is then written) — else the
// inner one's; and when the inner one refuses the request, the refusing
// limit's, so that a 429 never shows a Remaining above 0 of a limit that
// admitted it. Retry-After is the longer. Give both the same
// [WithHeaders] names and field set, or the fields do not meet, and an
// outer one's missing list is misread.
//
// On excess the strategy of the refusing rules applies (see policy's
// documentation for how several combine):
//
//   - reject: 429 Too Many Requests with Retry-After (whole seconds, rounded
//     up: a client that waits that long is admitted; none when a
//     concurrency limit refused, which promises no time, nor when the
//     request can never pass) and an RFC 9457
//     application/problem+json body of the draft's quota-exceeded type that
//     names the violated policies; with [WithRefuseStatus](503), 503 Service
//     Unavailable (the server shedding load) and a body of the draft's
//     temporary-reduced-capacity type, the fields the same;
//   - wait: the request is held — in the Engine's wait queue when the
//     Decider is a *policy.Engine, else by retrying after the advised delay —
//     up to the rule's max_wait, [WithMaxWait] and the request context's
//     deadline, then passed or rejected as above (also when its context
//     is cancelled while it waits: its client gone, or a handler around
//     the middleware cancelled it);
//   - degrade: the fallback handler registered under the rule's fallback
//     name ([WithFallback]) serves the request, with the header fields (a
//     fallback not registered, which New refuses when it can see the
//     rules: rejected as above, and logged);
//   - shadow: the request passes; the header fields still tell the truth.
//
// An admitted request that a shaper delays (Response.Delay) is held for that
// delay before it reaches the handler, which is how the shaper's burst and
// delay (nginx's limit_req) space requests out; one whose client gives up
// or whose deadline (or [WithMaxWait]) comes first does not reach the
// handler and gives back what it charged, when the Decider is a
// [Refunder] (policy.Engine), so it delays no later request; it is
// answered 503 with the header fields, the delaying limits stated as
// refusing until its turn (t, X-RateLimit-Reset and Retry-After alike),
// and the body of a 503 refusal: temporary-reduced-capacity, the delaying
// limits as violated-policies, the wait as retry-after, a detail saying
// that the wait passes the request's deadline, or that the request was
// cancelled (RESOURCE_EXHAUSTED to a gRPC call, as a refusal): a request
// cancelled while it is held is answered too, not left to net/http's
// empty 200. Concurrency limits hold
// their slot until the handler returns; the slot is released then, also
// when the handler panics. While the handler runs, a Decider that is a
// [Renewer] (policy.Engine) has the slot's lease renewed every third of
// its lease TTL (the shortest, when the request holds several), so that a
// handler slower than the TTL keeps its slot; the TTL is then only how
// long the slot of a process that died stays taken. A request that holds
// no slot gets no timer. A failed renewal is logged ([WithErrorLog]) and
// retried at the next tick; it does not cut the request.
//
// # Errors
//
// A request the extractor cannot map (a value longer than allowed) gets 400
// with a problem body saying which entry, and one without a client address
// where a remote_address entry needs it (a Unix socket peer and no trusted
// proxy header) 500: the server is set up wrong, not the request. A
// Decider error (the store is down or timed out) gets 503, whose body says
// which of the two without the store's own message, unless [WithFailOpen]
// lets it pass; a negative cost from [WithCost] (r.ContentLength is -1
// for a body of unknown length: see WithCost), like any request the
// Decider refuses as malformed, gets 500, never failed open nor admitted. Nothing panics on any
// request. [WithErrorLog] receives every such error in full.
//
// A gRPC call ([IsGRPC]: a POST over HTTP/2 with Content-Type
// application/grpc or application/grpc+…, e.g. a grpc.Server served through ServeHTTP) gets
// each of these answers as a gRPC error instead ([WriteProblemFor]): HTTP
// 200, trailers-only, grpc-status [GRPCCode] of the status —
// RESOURCE_EXHAUSTED for a refusal, INVALID_ARGUMENT for 400, INTERNAL for
// 500, UNAVAILABLE for 503 — the detail as grpc-message, and the header
// fields (Retry-After included) as the call's trailer metadata. A refusal
// that can say when to retry says it in milliseconds too, as
// grpc-retry-pushback-ms (gRPC's retry design, A6: a client whose retry
// policy retries RESOURCE_EXHAUSTED waits that long); one that can never
// pass says -1, which tells such a client not to retry. A gRPC call is
// never degraded: a fallback handler's answer is an HTTP response, not a
// gRPC one, so a degrade rule rejects it as above. Its client's deadline
// (grpc-timeout) bounds the wait strategy and the shaper's hold as a
// context deadline does: a call whose turn comes after it is refused at
// once.
//
// # Concurrency and clock
//
// A Middleware is immutable and safe for concurrent use. It reads no clock
// for its decisions (but ForLimiter's, for a calendar window's length on
// a key with nothing stored: [WithClock]): they use the store's clock. Holding compares the request's
// deadline with time.Now and waits on the runtime's timers, both of which
// testing/synctest fakes.
package middleware
