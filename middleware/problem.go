package middleware

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Problem types of the bodies this package writes.
const (
	// TypeQuotaExceeded is the problem type of a 429: the quota-exceeded
	// type of draft-ietf-httpapi-ratelimit-headers-10 §5.1, the client's
	// requests over its quota.
	TypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// TypeTemporaryReducedCapacity is the problem type of a refusal
	// answered 503 (WithRefuseStatus): the temporary-reduced-capacity
	// type of draft-ietf-httpapi-ratelimit-headers-10 §5.2, the server
	// short of capacity for the request.
	TypeTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	// TypeBlank is RFC 9457's default type: the status code says it all.
	TypeBlank = "about:blank"
)

// The titles the draft gives its problem types (§5.1, §5.2).
const (
	titleQuotaExceeded   = "Request cannot be satisfied as assigned quota has been exceeded"
	titleReducedCapacity = "Request cannot be satisfied due to temporary server capacity constraints"
)

// Problem is an RFC 9457 problem details object, the body of every response
// this package (and the gateway) writes itself.
type Problem struct {
	// Type identifies the kind of problem (a URI): TypeQuotaExceeded for
	// a refusal by the limits answered 429, TypeTemporaryReducedCapacity
	// for one answered 503 (WithRefuseStatus, or a shaped request whose
	// turn comes after its deadline), TypeBlank for the others (400,
	// 500, a Decider's 503). WriteProblem writes TypeBlank for "".
	Type string `json:"type"`
	// Title is a short human-readable summary of the type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`
	// ViolatedPolicies names the limits that refused the request, as the
	// quota-exceeded and temporary-reduced-capacity types define; they
	// are the policy names of the RateLimit fields.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter repeats the Retry-After field in seconds; absent when
	// there is none: the request can never pass, a concurrency limit
	// refused it, or the problem is no refusal.
	RetryAfter *int64 `json:"retry-after,omitempty"`
}

// WriteProblem writes p as an application/problem+json response with status
// p.Status (500 when unset). Header fields already set on w are kept.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	if p.Type == "" {
		p.Type = TypeBlank
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen with these field types
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Encoding")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// WriteProblemFor writes p in the form r's client reads: a gRPC request
// (IsGRPC) gets a gRPC error, an HTTP 200 trailers-only response with
// grpc-status GRPCCode(p.Status) and grpc-message p.Detail (p.Title when
// empty), percent-encoded as gRPC requires; any other request, the
// problem body (WriteProblem). Either way the header fields already set on
// w are kept: a gRPC client reads the rate limit fields and Retry-After
// as the error's trailer metadata. A gRPC client reads an HTTP error
// status as UNAVAILABLE ("unexpected HTTP status code 429"), which its
// retry policy may retry at once; RESOURCE_EXHAUSTED says what happened.
func WriteProblemFor(w http.ResponseWriter, r *http.Request, p Problem) {
	if !IsGRPC(r) {
		WriteProblem(w, p)
		return
	}
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	msg := cmp.Or(p.Detail, p.Title, http.StatusText(p.Status))
	h := w.Header()
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(GRPCCode(p.Status)))
	h.Set("Grpc-Message", grpcMessage(msg))
	// No body: net/http's HTTP/2 server then sends the header alone,
	// ending the stream, which is gRPC's trailers-only response.
	w.WriteHeader(http.StatusOK)
}

// IsGRPC reports whether r is a gRPC call: a POST over HTTP/2 (or
// later) whose Content-Type is application/grpc, or application/grpc+…
// (+proto, +json), with or without parameters. gRPC-Web
// (application/grpc-web…) is not: its clients read HTTP statuses. Nor is
// any other method or an HTTP/1.x request, which no gRPC client sends: a
// refusal answered 200 to, say, a GET that anyone can make with that
// Content-Type, is a response a shared cache could keep and serve to
// everyone else for the URL in place of the page.
func IsGRPC(r *http.Request) bool {
	if r.Method != http.MethodPost || r.ProtoMajor < 2 {
		return false
	}
	ct := r.Header.Get("Content-Type")
	if len(ct) < len("application/grpc") || !strings.EqualFold(ct[:len("application/grpc")], "application/grpc") {
		return false
	}
	rest := ct[len("application/grpc"):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// grpcDeadline returns ctx bounded by the deadline of r's gRPC client
// (its grpc-timeout field, which net/http does not read) when r is a
// gRPC call, ctx itself otherwise, and the cancel to call when done. It
// bounds the wait strategy and the shaper's hold, not the first decision:
// a call whose turn comes after its client gives up is refused at once
// (RESOURCE_EXHAUSTED, with its pushback) instead of held until the
// client's own DEADLINE_EXCEEDED, and a short deadline does not fail a
// store call (which a circuit breaker would count).
func grpcDeadline(ctx context.Context, r *http.Request) (context.Context, context.CancelFunc) {
	if !IsGRPC(r) {
		return ctx, nop
	}
	d, ok := grpcTimeout(r.Header.Get("Grpc-Timeout"))
	if !ok {
		return ctx, nop
	}
	return context.WithTimeout(ctx, d)
}

// grpcTimeout parses a grpc-timeout value: 1 to 8 digits and a unit,
// H, M, S, m (ms), u (µs) or n (ns).
func grpcTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
	if err != nil || n < 0 || v[0] == '+' || v[0] == '-' {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	return time.Duration(n) * unit, true
}

// grpcPushback is the trailer in which a gRPC server tells a retrying
// client how many milliseconds to wait, or with a negative value not to
// retry (gRPC proposal A6, client retries).
const grpcPushback = "Grpc-Retry-Pushback-Ms"

// setPushback sets grpc-retry-pushback-ms on h to wait in milliseconds,
// rounded up, so that a client retrying after it finds its turn come.
func setPushback(h http.Header, wait time.Duration) {
	h.Set(grpcPushback, strconv.FormatInt(int64((wait+time.Millisecond-1)/time.Millisecond), 10))
}

// gRPC status codes of GRPCCode (google.golang.org/grpc/codes, which this
// package does not import).
const (
	grpcUnknown           = 2
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcInternal          = 13
	grpcUnavailable       = 14
)

// GRPCCode is the gRPC status code that says to a gRPC client what the
// HTTP status says to an HTTP client, for the statuses this package and
// the gateway write:
//
//   - 400 (a key value the request cannot be limited by): INVALID_ARGUMENT (3);
//   - 408 (the request body did not arrive in time): DEADLINE_EXCEEDED (4);
//   - 413 (too large) and 429 (a limit refused it): RESOURCE_EXHAUSTED (8),
//     which gRPC itself uses for a message over the size limit and for
//     quota, and whose clients do not retry it unless told to;
//   - 500 (the server is set up wrong, the cost function failed): INTERNAL (13);
//   - 502, 503, 504 (the upstream failed or timed out, the store could
//     not decide): UNAVAILABLE (14), as gRPC and Envoy read them:
//     transient, retry with back-off (a refusal by the limits answered
//     503 to an HTTP client, by WithRefuseStatus or a shaper's turn past
//     the deadline, is a 429 to a gRPC one, RESOURCE_EXHAUSTED);
//   - any other: UNKNOWN (2).
func GRPCCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return grpcInvalidArgument
	case http.StatusRequestTimeout:
		return grpcDeadlineExceeded
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return grpcResourceExhausted
	case http.StatusInternalServerError:
		return grpcInternal
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailable
	}
	return grpcUnknown
}

// grpcMessage percent-encodes s as grpc-message wants: every byte outside
// printable ASCII (0x20–0x7E), and "%", as %XX.
func grpcMessage(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}
