// Package gateway is Floodgate's gateway mode (`floodgate serve --upstream
// URL`): a reverse proxy (net/http/httputil.ReverseProxy) in front of a
// service that has no rate limiting of its own, limiting requests by routes
// declared in the rules, the way nginx's limit_req and limit_conn do at the
// edge.
//
// # Routes
//
// A domain of the rules declares its routes in a gateway: section (see
// [Section]): each matches requests by host ("api.example.com" or
// "*.example.com"; only with WithPreserveHost(true), as the Host is the
// client's to choose and an upstream that does not see it would serve
// another Host the same path), path prefix (on the decoded, cleaned path,
// case-sensitively unless path_case_insensitive) and methods (in any
// case: "get" is limited as GET), and maps them to descriptors
// (package dimension: remote address behind trusted proxies, headers, path,
// query, API key, ...) that the domain's descriptors then limit. A header
// or query parameter a route reads that the upstream could read as
// another value (sent twice, where PHP takes the last and Go the first; a
// query value not UTF-8 or holding a control character once decoded) gets
// 400 (dimension.WithRejectAmbiguous) rather than be limited as one client
// and served as another; a header the client names in Connection, which
// the upstream does not get (it is hop-by-hop), is read as absent, and
// a forwarding field (X-Forwarded-For, X-Real-IP, True-Client-IP,
// X-Forwarded-Host, ...) from a peer not trusted as a proxy is read as
// the upstream gets it, whether or not the client sent it (the peer, the
// gateway's own, or absent; see Proxying). The most
// specific route wins: the longest path prefix, then an exact host over a
// wildcard over any host, then listed methods over any, then file order.
// A request that matches no route is proxied unlimited. The package
// registers the section with the policy loader (policy.RegisterSection), so
// `floodgate validate` checks it and reports problems as file:line.
//
// # Shaping, not only rejecting
//
// Whatever a rule's algorithm says applies (package middleware does the
// deciding): a shaper rule (algorithm: shaper, burst: N, delay: D) is
// nginx's limit_req burst=N delay=D — the first D excess requests pass at
// once, the rest of the burst are held and released at the rule's rate,
// and requests beyond the burst are refused; a concurrency rule is
// limit_conn — a key holds a slot from the moment its request is admitted
// until its response (streamed body and websocket included) is complete,
// a websocket's when either side closes (the upstream's close, which the
// client is told of, is enough):
// while it lives, its lease is renewed every third of lease_ttl, and
// lease_ttl is how long the slot of a gateway that died stays taken;
// wait, degrade and shadow strategies work as in the middleware.
//
// # Proxying
//
// Admitted requests go to the upstream URL with the request's path
// appended to its path: as received when every byte is one Go's url
// escaping leaves as is, re-encoded otherwise ("\" as %5C), so that a
// WHATWG URL parser upstream reads the path the route was matched on; a
// target holding "#" gets 400. The gateway is the whole handler: it
// answers no path itself and cleans none (floodgate serve then moves the
// decision APIs to an address of their own). Forwarding headers carry the
// chain the gateway trusts, the same on every path: a trusted proxy's
// X-Forwarded-For (and Forwarded, when the section's proxy_header is
// forwarded) kept with the peer appended, any other peer's replaced by the
// peer alone (a client's header is not passed on as if a proxy had written
// it); an unrouted request trusts the proxies of every section. An
// untrusted peer's X-Real-IP becomes the peer and its other address fields
// (True-Client-IP, CF-Connecting-IP, ...) are dropped, whatever the
// configured header. X-Forwarded-Host and -Proto are a trusted proxy's
// when it sent them (a TLS load balancer in front knows the client's
// scheme), else the gateway's own. Request trailers are passed on, and the
// transport adds no Accept-Encoding of its own. Responses stream through: text/event-stream
// and bodies without a length are flushed as they arrive, and protocol
// upgrades (websockets) are spliced through untouched. WithUpstreamTimeout
// (default 60 s) bounds the upstream's silence, WithClientTimeout (default
// 60 s) the client's: a write to it or a read of its body that makes no
// progress for that long ends the request (aborted, or 408), releasing its
// slots — also each write after a websocket upgrade, but not an idle
// websocket. An upstream that fails is
// reported, not hidden: 502 (504 on a timeout) with an RFC 9457 problem
// body that says so without naming the upstream or its error (the error
// log has them, each cause of each route at most once per
// UpstreamLogInterval, and
// WithUpstreamErrors counts them by reason); one that fails after the
// response header has its response cut off, and is logged and counted
// the same way. A request body the client breaks (malformed chunking,
// cut short of its Content-Length, a reset, over a limit an outer
// http.MaxBytesHandler set) is the client's failure: 400 (413 over the
// limit), neither counted nor sampled as the upstream's. A section's
// refuse_status (429 or 503) is the status of its routes' refusals, whose
// problem body is of the draft's type for it: quota-exceeded for 429,
// temporary-reduced-capacity for 503.
//
// Rate limit fields: the gateway's are set on every limited response; the
// upstream's IETF RateLimit and RateLimit-Policy members are kept beside
// them (they are lists), its X-RateLimit-Limit, -Remaining and -Reset are
// replaced by the gateway's, and kept on a response the gateway set none
// on (no descriptor of its route applied to the request).
//
// # Browser code on other origins (CORS)
//
// A section's cors: block (see [CORSSpec]) is for an API that pages of
// other origins call. A CORS preflight (OPTIONS with Origin and
// Access-Control-Request-Method) from an allowed origin is proxied
// unlimited (limit_preflights: true counts it), and the gateway's own
// answers to a request from an allowed origin — refusals and its other
// errors — carry Access-Control-Allow-Origin (the origin, or "*" when
// allow_origins is ["*"], which is never sent with credentials),
// Vary: Origin and Access-Control-Expose-Headers naming the rate limit
// fields as configured and Retry-After, so that browser code can read a
// 429 and when to retry. The upstream owns its CORS policy: its answers
// get no Access-Control-Allow-Origin from the gateway; one that allows
// the origin gets the gateway's fields appended to its
// Access-Control-Expose-Headers. A request that matches no route is
// answered under the cors blocks of every section. Without a block,
// nothing of this happens.
//
// # HTTP/2 upstreams
//
// The upstream URL says how it is reached: http:// in HTTP/1.1, https://
// over TLS in HTTP/2 when the upstream offers h2 by ALPN (HTTP/1.1
// otherwise), h2c:// in HTTP/2 without TLS, with prior knowledge (a gRPC
// backend, a service that speaks only h2c). Limits, fields, bodies,
// streaming and trailers are the same whichever it is. HTTP/2 has no
// protocol upgrade: a websocket for an h2c upstream gets 502 without
// reaching it (logged, not counted as an upstream failure); for an https
// upstream it goes in HTTP/1.1, which the upstream must also speak. A
// client's offer to switch to h2c (Upgrade: h2c) is the gateway's to
// decline and is never passed on: an upstream that took it would carry
// the connection's later requests past the limits.
//
// # gRPC clients
//
// Served by an HTTP/2 server — floodgate serve's gateway address speaks
// h2c with prior knowledge beside HTTP/1.1, and h2 over TLS — the gateway
// fronts gRPC clients: routes match /package.Service/Method, admitted
// calls stream through with the upstream's grpc-status, grpc-message and
// trailer metadata untouched, e.g. through floodgate serve --upstream
// h2c://127.0.0.1:50051 on 127.0.0.1:8080:
//
//	grpcurl -plaintext -d '{}' 127.0.0.1:8080 grpc.health.v1.Health/Check
//
// Every answer of the gateway's own to a gRPC call (a POST over HTTP/2
// with Content-Type application/grpc or application/grpc+…) is a gRPC error, not an HTTP
// status, which a gRPC client would read as UNAVAILABLE: HTTP 200,
// trailers-only, with grpc-status middleware.GRPCCode of the HTTP status —
// RESOURCE_EXHAUSTED for a limit's refusal (whatever refuse_status says),
// INVALID_ARGUMENT for 400, UNAVAILABLE for 502, 503 and 504 — and the
// problem's detail as grpc-message; the rate limit fields and Retry-After
// are the call's trailer metadata (middleware.WriteProblemFor), with
// grpc-retry-pushback-ms for a limit's refusal (middleware.Reject). A
// degrade rule rejects a gRPC call rather than hand it to its fallback.
//
// # Reload, concurrency, clock
//
// When the Decider is a *policy.Engine the routes follow its configuration
// reloads; Gateway.SetConfig installs rules and routes all or nothing, and
// Check reports, at their lines, the routes New would refuse. A Gateway is safe for concurrent use. It reads no clock itself:
// decisions use the store's clock, holding uses the runtime's timers.
package gateway
