package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
)

// HTTPHandler serves the --http address: without a gateway, the decision
// APIs (APIHandler); in gateway mode, the gateway alone — every path goes to
// the upstream as received (no /json, /v1/ or /healthcheck of its own, no
// path cleaning or redirects), so that a public client cannot spend other
// clients' budgets through the decision APIs and an upstream's own /v1/
// paths can be fronted. The APIs are then served by APIHandler on an
// address of their own (Listeners.API), or not at all.
func (s *Server) HTTPHandler() http.Handler {
	if s.gateway != nil {
		return s.gateway
	}
	return s.APIHandler()
}

// APIHandler serves the decision APIs: POST /json (Envoy's JSON twin), the
// native API under /v1/ and GET /healthcheck (envoyproxy/ratelimit's health
// path); any other path is 404. It is HTTPHandler without a gateway and
// what Listeners.API serves. A state-changing request a browser sent for a
// page of another site is 403 on every path (refuseCrossOrigin).
func (s *Server) APIHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json", s.handleJSON)
	mux.HandleFunc("/v1/decide", s.handleV1(false))
	mux.HandleFunc("/v1/peek", s.handleV1(true))
	mux.Handle("/v1/observe", s.guardObserve(http.HandlerFunc(s.handleObserve)))
	mux.HandleFunc("/v1/release", s.handleLeases(releaseOp))
	mux.HandleFunc("/v1/renew", s.handleLeases(renewOp))
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s; the API is POST /v1/decide, POST /v1/peek, POST /v1/release, POST /v1/renew and POST /v1/observe", r.URL.Path))
	})
	mux.HandleFunc("/healthcheck", s.handleHealthcheck)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		msg := fmt.Sprintf("no such endpoint %s; use POST /json or POST /v1/decide", r.URL.Path)
		if s.gateway == nil {
			msg += " (no --upstream is set)"
		}
		writeError(w, http.StatusNotFound, msg)
	})
	return s.bodyDeadline(refuseCrossOrigin(mux))
}

// refuseCrossOrigin answers 403 to a request that a browser sent for a page
// of another site and that is not a GET, HEAD or OPTIONS (browserSafe
// without its Host check): the decision APIs read text/plain and form
// bodies as JSON, which an HTML form or a fetch posts without a CORS
// preflight, so a page the operator visits could spend, release or renew
// budgets on a loopback --http or --api address (CSRF). Clients that send
// neither Origin nor Sec-Fetch-Site — Envoy, SDKs, curl, scripts — are not
// affected, nor a page of the same origin.
func refuseCrossOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !browserSafe(w, r, "the decision APIs", false) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bodyDeadline bounds the reading of a request's declared body to the body
// timeout from the handler's start, whoever reads it: the handler
// (readBody) or net/http, which reads an unread body (up to 256 KB) before
// writing the answer, so that the connection can serve the next request.
// That read has no deadline of its own: a request answered without its body
// being read (a 401, a 403, a 404, GET /metrics) whose client declared a
// body and never sent it held its connection and goroutine for as long as
// the client kept it open, however many it opened. With the deadline the
// answer goes out once the timeout passes, and the connection is closed.
// A request without a body is left alone: net/http's background read for a
// client going away runs during its handler, and a deadline would end it.
func (s *Server) bodyDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
		}
		h.ServeHTTP(w, r)
	})
}

// httpError is an error with the status code it is answered with.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

// writeError answers {"error": msg} with code.
func writeError(w http.ResponseWriter, code int, msg string) (requestCode string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(struct {
		Error string `json:"error"`
	}{msg})
	return codeOfStatus(code)
}

// writeErr answers err with its status (writeError) and returns
// requests_total's code for it.
func writeErr(w http.ResponseWriter, err error) (requestCode string) {
	code, msg := errorStatus(err)
	return writeError(w, code, msg)
}

// errorStatus is the status and the message err is answered with: a
// store's failure says what failed (store.Failure), not the error's text,
// which holds the store key (a descriptor's value: a client's address, an
// API key) and the wrappers' chain.
func errorStatus(err error) (code int, msg string) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.code, he.msg
	case errors.Is(err, ErrBadInput), errors.Is(err, policy.ErrBadRequest):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, policy.ErrUnknownRule):
		return http.StatusNotFound, err.Error()
	default:
		return http.StatusServiceUnavailable, "rate limit decision failed: " + store.Failure(err)
	}
}

// Codes of requests_total beside the decisions' OK and OVER_LIMIT (and
// /v1's "batch"): a request the client got wrong (bad JSON, a missing
// domain, a body too large, an unknown /v1 domain; INVALID_ARGUMENT over
// gRPC), and one the server failed (the store and the failure policy
// both failed, a cancelled or timed-out call, an internal error), so that
// an alert on server failures does not fire on a client's mistakes.
const (
	codeInvalid = "invalid"
	codeError   = "error"
)

// codeOfStatus is requests_total's code of an HTTP error status: invalid
// for a 4xx (the client's), error for the rest.
func codeOfStatus(status int) string {
	if status >= 400 && status < 500 {
		return codeInvalid
	}
	return codeError
}

// jsonContentType reports whether a request's Content-Type may carry JSON:
// none, application/json or any +json type, text/plain, and
// application/x-www-form-urlencoded (what `curl -d` sends; the body is
// still read as JSON, as envoyproxy/ratelimit does).
func jsonContentType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/plain" ||
		mt == "application/x-www-form-urlencoded"
}

// readBody checks the method and content type and reads a bounded,
// UTF-8 body, within the body timeout (408 after it).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return nil, &httpError{http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use POST with a JSON body", r.Method, r.URL.Path)}
	}
	if ct := r.Header.Get("Content-Type"); !jsonContentType(ct) {
		return nil, &httpError{http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: the body must be JSON (application/json)", ct)}
	}
	// The connection's read deadline bounds the body. net/http lifts it
	// when the body's end is read (its background read for the client
	// going away starts then), so a decision held longer ("wait": true)
	// is not cancelled by it. After a failed read it stays: the server
	// then gives up on the rest of the body without waiting for it.
	// Writers without deadlines (httptest.ResponseRecorder) read unbounded.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body over the %d-byte limit", s.maxBody)}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, &httpError{http.StatusRequestTimeout, fmt.Sprintf("request body not received within %v", s.bodyTimeout)}
		}
		return nil, &httpError{http.StatusBadRequest, "reading the body: " + err.Error()}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, &httpError{http.StatusBadRequest, "empty body: want a JSON object"}
	}
	if !utf8.Valid(body) {
		return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("body is not valid UTF-8 (first bad byte at offset %d)", badUTF8(body))}
	}
	return body, nil
}

func badUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// handleHealthcheck is envoyproxy/ratelimit's GET /healthcheck: 200 with
// its body "OK" while the server serves; 503 from the moment shutdown
// begins (envoyproxy/ratelimit answers 500): "shutting down" during the
// shutdown delay, as /readyz and the gRPC health report it, so that a
// readiness probe on it takes the instance out of rotation before its
// listeners close, then "draining".
func (s *Server) handleHealthcheck(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.draining.Load():
		writeError(w, http.StatusServiceUnavailable, "draining")
		return
	case s.stopping.Load():
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("OK"))
}

// handleJSON is envoyproxy/ratelimit's /json: the protojson form of
// RateLimitRequest in, of RateLimitResponse out; 200 for OK, 429 for
// OVER_LIMIT, 400 with the reason for a bad request. With WithEnvoyHeaders
// the response also carries response_headers_to_add as real HTTP headers.
func (s *Server) handleJSON(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := codeError
	defer func() { s.metrics.Request("json", code, time.Since(start)) }()
	body, err := s.readBody(w, r)
	if err != nil {
		code = writeErr(w, err)
		return
	}
	var in rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &in); err != nil {
		code = writeError(w, http.StatusBadRequest, "not a RateLimitRequest in protojson: "+err.Error())
		return
	}
	resp, err := s.shouldRateLimit(r.Context(), &in)
	if err != nil {
		code = writeErr(w, err)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		code = writeError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	code = codeName(resp.OverallCode)
	h := w.Header()
	for _, hv := range resp.ResponseHeadersToAdd {
		h.Set(hv.GetKey(), hv.GetValue())
	}
	h.Set("Content-Type", "application/json")
	switch resp.OverallCode {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		w.WriteHeader(http.StatusTooManyRequests)
	case rlsv3.RateLimitResponse_OK:
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusInternalServerError)
	}
	w.Write(out)
}

// V1Request is a native API request (one element of a batch).
type V1Request struct {
	Domain      string         `json:"domain"`
	Descriptors []V1Descriptor `json:"descriptors"`
	// Hits is the cost (default 1).
	Hits int64 `json:"hits,omitempty"`
	// Priority is the request's priority class.
	Priority string `json:"priority,omitempty"`
	// Wait asks /v1/decide to hold the request while a wait-strategy rule
	// queues it (up to the rule's max_wait or the HTTP request's end).
	Wait bool `json:"wait,omitempty"`
}

// V1Descriptor is one descriptor of a native request.
type V1Descriptor struct {
	Entries []V1Entry `json:"entries"`
	// Hits overrides the request's hits for this descriptor.
	Hits int64 `json:"hits,omitempty"`
	// Limit replaces the configured limit for this descriptor.
	Limit *V1Limit `json:"limit,omitempty"`
}

// V1Entry is one key/value pair.
type V1Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// V1Limit is a per-request limit: requests_per_unit per unit (a unit of
// the configuration — "second", "minute", "hour", "day", "week", or the
// calendar "month" and "year" — or a duration such as "30s"). requests_per_unit
// is required (0 blocks), as in the configuration.
type V1Limit struct {
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Unit            string `json:"unit"`

	rpuSet bool // requests_per_unit was in the JSON
}

// UnmarshalJSON decodes l, noting whether requests_per_unit was given:
// left out it would read as 0, a limit that refuses everything.
func (l *V1Limit) UnmarshalJSON(b []byte) error {
	var v struct {
		RequestsPerUnit *int64 `json:"requests_per_unit"`
		Unit            string `json:"unit"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	*l = V1Limit{Unit: v.Unit}
	if v.RequestsPerUnit != nil {
		l.RequestsPerUnit, l.rpuSet = *v.RequestsPerUnit, true
	}
	return nil
}

// V1Batch is a batch of native requests.
type V1Batch struct {
	Requests []V1Request `json:"requests"`
}

// V1Response is the answer to one native request.
type V1Response struct {
	// Code is "OK" or "OVER_LIMIT"; Allowed is Code == "OK".
	Code    string `json:"code"`
	Allowed bool   `json:"allowed"`
	// Statuses has one entry per descriptor, in order.
	Statuses []V1Status `json:"statuses"`
	// DelayMS is how long to hold the request before passing it on (shapers).
	DelayMS int64 `json:"delay_ms,omitempty"`
	// Strategy is the refusing rules' strategy on excess (reject, wait,
	// degrade, shadow); Fallback the degrade fallback's name.
	Strategy string `json:"strategy,omitempty"`
	Fallback string `json:"fallback,omitempty"`
	// Priority is the class the request was decided in; PriorityUnknown
	// is set when the request's priority named none the domain declares,
	// so that it was decided in the default class (a typo, or classes
	// renamed in the configuration).
	Priority        string `json:"priority,omitempty"`
	PriorityUnknown bool   `json:"priority_unknown,omitempty"`
	// WaitedMS is how long a "wait": true request was held.
	WaitedMS int64 `json:"waited_ms,omitempty"`
	// StoreFallback is set when the store did not answer (down or too
	// slow) and --on-store-error answered instead: an OVER_LIMIT then is
	// the closed policy's, not the limit's.
	StoreFallback bool `json:"store_fallback,omitempty"`
	// Headers are the rate limit header fields for the client.
	Headers map[string]string `json:"headers,omitempty"`
	// Lease is set when the request was admitted holding concurrency
	// slots: the token to POST to /v1/release (on any instance sharing
	// the store) when the work is done. LeaseTTLMS is how long after the
	// decision the slots come back on their own if it never is (the
	// shortest lease_ttl of the limits involved).
	Lease      string `json:"lease,omitempty"`
	LeaseTTLMS int64  `json:"lease_ttl_ms,omitempty"`
	// Error is the message of a batch element that failed, which the
	// server sends as {"error": "..."} alone: decoded into a V1Response,
	// it is the only field set.
	Error string `json:"error,omitempty"`
}

// V1Status is one descriptor's outcome. Times are in milliseconds, rounded
// up; retry_after_ms is -1 when the cost can never be admitted. Limit and
// Remaining are set (and encoded, 0 included) exactly when the descriptor
// matched a rule with a limit; they are nil for no match and for an
// unlimited rule.
type V1Status struct {
	Code         string          `json:"code"`
	Matched      bool            `json:"matched"`
	Rule         string          `json:"rule,omitempty"`
	Unlimited    bool            `json:"unlimited,omitempty"`
	Shadow       bool            `json:"shadow,omitempty"`
	Borrowed     bool            `json:"borrowed,omitempty"`
	Undecided    bool            `json:"undecided,omitempty"`
	Limit        *int64          `json:"limit,omitempty"`
	Remaining    *int64          `json:"remaining,omitempty"`
	RetryAfterMS int64           `json:"retry_after_ms,omitempty"`
	ResetAfterMS int64           `json:"reset_after_ms,omitempty"`
	WindowMS     int64           `json:"window_ms,omitempty"`
	Limits       []V1LimitStatus `json:"limits,omitempty"`
}

// V1LimitStatus is one of the limits a descriptor was measured against.
type V1LimitStatus struct {
	Name         string `json:"name"`
	Allowed      bool   `json:"allowed"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	ResetAfterMS int64  `json:"reset_after_ms,omitempty"`
	WindowMS     int64  `json:"window_ms,omitempty"`
	Shadow       bool   `json:"shadow,omitempty"`
}

func ms(d time.Duration) int64 {
	if d == algo.Never {
		return -1
	}
	if d <= 0 {
		return 0
	}
	n := int64(d / time.Millisecond) // rounded up below: adding first overflows near the largest
	if d%time.Millisecond != 0 {
		n++
	}
	return n
}

// toPolicy converts and validates a native request; i names it in a batch.
func (v V1Request) toPolicy() (policy.Request, error) {
	req := policy.Request{Domain: v.Domain, Hits: v.Hits, Priority: v.Priority}
	if err := checkHits("hits", v.Hits); err != nil {
		return req, err
	}
	req.Descriptors = make([]policy.Descriptor, len(v.Descriptors))
	for i, d := range v.Descriptors {
		pd := &req.Descriptors[i]
		if err := checkHits(fmt.Sprintf("descriptors[%d].hits", i), d.Hits); err != nil {
			return req, err
		}
		pd.Hits = d.Hits
		pd.Entries = make([]policy.Entry, len(d.Entries))
		for j, e := range d.Entries {
			pd.Entries[j] = policy.Entry(e)
		}
		if d.Limit != nil {
			unit, cal, ok := policy.ParseUnit(d.Limit.Unit)
			if !ok {
				var err error
				if unit, err = time.ParseDuration(d.Limit.Unit); err != nil || unit <= 0 {
					return req, badInput("descriptors[%d].limit.unit %q: want second, minute, hour, day, week, month, year or a duration like 30s", i, d.Limit.Unit)
				}
			}
			if !d.Limit.rpuSet {
				return req, badInput("descriptors[%d].limit: requests_per_unit is required (0 blocks every request)", i)
			}
			if d.Limit.RequestsPerUnit < 0 {
				return req, badInput("descriptors[%d].limit.requests_per_unit %d is negative", i, d.Limit.RequestsPerUnit)
			}
			pd.Limit = &policy.LimitOverride{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: unit, Calendar: cal}
		}
	}
	return req, nil
}

func (s *Server) v1Response(resp *policy.Response) V1Response {
	out := V1Response{Code: resp.Code.String(), Allowed: resp.Code == policy.CodeOK, Statuses: make([]V1Status, len(resp.Statuses)),
		DelayMS: ms(resp.Delay), Priority: resp.Priority, PriorityUnknown: resp.PriorityUnknown, WaitedMS: ms(resp.Waited), StoreFallback: resp.StoreFallback}
	if resp.Code != policy.CodeOK || resp.Strategy == policy.StrategyShadow {
		out.Strategy, out.Fallback = resp.Strategy, resp.Fallback
	}
	for i, st := range resp.Statuses {
		vs := V1Status{Code: st.Code.String(), Matched: st.Matched, Rule: st.Rule, Unlimited: st.Unlimited, Shadow: st.Shadow,
			Borrowed: st.Borrowed, WindowMS: ms(st.Window)}
		switch {
		case st.Undecided():
			// No limit decided it: no count to state, not a quota of 0.
			vs.Undecided, vs.WindowMS = true, 0
		case st.Matched && !st.Unlimited:
			vs.Limit, vs.Remaining = &st.Decision.Limit, &st.Decision.Remaining
			vs.RetryAfterMS, vs.ResetAfterMS = ms(st.Decision.RetryAfter), ms(st.Decision.ResetAfter)
		}
		for _, l := range st.Limits {
			vs.Limits = append(vs.Limits, V1LimitStatus{Name: l.Name, Allowed: l.Decision.Allowed, Limit: l.Decision.Limit, Remaining: l.Decision.Remaining,
				RetryAfterMS: ms(l.Decision.RetryAfter), ResetAfterMS: ms(l.Decision.ResetAfter), WindowMS: ms(l.Window), Shadow: l.Shadow})
		}
		out.Statuses[i] = vs
	}
	s.headerWriter.StatusFields(visible(resp.Statuses), func(name, value string) {
		if out.Headers == nil {
			out.Headers = make(map[string]string, 6)
		}
		out.Headers[name] = value
	})
	if ls := resp.Leases(); len(ls) > 0 {
		out.Lease, out.LeaseTTLMS = encodeLease(ls), ms(shortestTTL(ls))
	}
	return out
}

// shortestTTL is when the first of a decision's slots expires.
func shortestTTL(ls []policy.Lease) time.Duration {
	d := ls[0].TTL
	for _, l := range ls[1:] {
		d = min(d, l.TTL)
	}
	return d
}

// decodeStrict decodes JSON into v, rejecting unknown fields, duplicate
// fields and trailing data, with errors that say where.
func decodeStrict(body []byte, v any) error {
	if err := noDuplicateFields(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badInput("malformed JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te) && te.Field == "":
			return badInput("the body must be a JSON object, not a JSON %s", te.Value)
		case errors.As(err, &te):
			return badInput("field %q: want %s, got %s (at byte %d)", te.Field, jsonKind(te.Type), te.Value, te.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badInput("truncated JSON")
		}
		return badInput("%v", err)
	}
	if rest := bytes.TrimSpace(body[dec.InputOffset():]); len(rest) > 0 {
		return badInput("unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	return nil
}

// jsonKind names what JSON value decodes into t, for messages: the
// client wrote JSON, not Go.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// noDuplicateFields reports a field named twice in one JSON object, which
// encoding/json would settle silently in favour of the last one (a proxy
// reading the first would see another request than the limiter does);
// /json refuses them too. Malformed JSON is left to the decoder's errors.
func noDuplicateFields(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	type level struct {
		keys   map[string]bool // nil for an array
		expect bool            // an object's next string token is a key
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // EOF, or malformed: decoding says so
		}
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, level{keys: map[string]bool{}, expect: true})
			case '[':
				stack = append(stack, level{})
			default:
				stack = stack[:top]
				if top > 0 && stack[top-1].keys != nil {
					stack[top-1].expect = true
				}
			}
			continue
		}
		if top < 0 || stack[top].keys == nil {
			continue
		}
		if stack[top].expect {
			k, _ := tok.(string)
			if stack[top].keys[k] {
				return badInput("duplicate field %q (at byte %d)", k, dec.InputOffset())
			}
			stack[top].keys[k] = true
			stack[top].expect = false
		} else {
			stack[top].expect = true // a scalar value: the next token is a key
		}
	}
}

// handleV1 serves /v1/decide (peek false) and /v1/peek: one request, or a
// batch {"requests": [...]} answered by {"results": [...]}. A single
// decide answers 200 when allowed and 429 when over the limit, with the
// rate limit headers; peeks and batches always answer 200. An admitted
// decide that holds concurrency slots answers a lease token for
// /v1/release (each batch element its own).
func (s *Server) handleV1(peek bool) http.HandlerFunc {
	transport := "v1"
	if peek {
		transport = "v1-peek"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := codeError
		defer func() { s.metrics.Request(transport, code, time.Since(start)) }()
		body, err := s.readBody(w, r)
		if err != nil {
			code = writeErr(w, err)
			return
		}
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(body, &probe); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field == "" {
				code = writeErr(w, badInput(`the body must be a JSON object, not a JSON %s: a request {"domain": …, "descriptors": […]} or a batch {"requests": […]}`, te.Value))
				return
			}
			if derr := decodeStrict(body, &probe); derr != nil {
				err = derr
			}
			if !errors.Is(err, ErrBadInput) {
				err = badInput("malformed JSON: %v", err)
			}
			code = writeErr(w, err)
			return
		}
		if _, isBatch := probe["requests"]; isBatch {
			var b V1Batch
			if err := decodeStrict(body, &b); err != nil {
				code = writeErr(w, err)
				return
			}
			if len(b.Requests) == 0 {
				code = writeError(w, http.StatusBadRequest, "requests must not be empty")
				return
			}
			if len(b.Requests) > s.limits.Batch {
				code = writeError(w, http.StatusBadRequest, fmt.Sprintf("%d requests in the batch, over the limit of %d", len(b.Requests), s.limits.Batch))
				return
			}
			// Each element is a V1Response, or {"error": "..."} alone.
			results := make([]any, len(b.Requests))
			for i, vr := range b.Requests {
				resp, err := s.v1Decide(r, vr, peek)
				if err != nil {
					_, msg := errorStatus(err)
					results[i] = struct {
						Error string `json:"error"`
					}{fmt.Sprintf("requests[%d]: %s", i, msg)}
					continue
				}
				results[i] = s.v1Response(&resp)
			}
			code = "batch"
			writeJSON(w, http.StatusOK, struct {
				Results []any `json:"results"`
			}{results})
			return
		}
		var vr V1Request
		if err := decodeStrict(body, &vr); err != nil {
			code = writeErr(w, err)
			return
		}
		resp, err := s.v1Decide(r, vr, peek)
		if err != nil {
			code = writeErr(w, err)
			return
		}
		out := s.v1Response(&resp)
		code = out.Code
		status := http.StatusOK
		if !peek {
			for k, v := range out.Headers {
				w.Header().Set(k, v)
			}
			if !out.Allowed {
				status = http.StatusTooManyRequests
			}
		}
		writeJSON(w, status, out)
	}
}

func (s *Server) v1Decide(r *http.Request, vr V1Request, peek bool) (policy.Response, error) {
	req, err := vr.toPolicy()
	if err != nil {
		return policy.Response{}, err
	}
	if err := s.limits.check(&req); err != nil {
		return policy.Response{}, err
	}
	if s.engine.Config().Domain(req.Domain) == nil {
		return policy.Response{}, &httpError{http.StatusNotFound, fmt.Sprintf("unknown domain %q (the configuration has %s)", req.Domain, domainList(s.engine.Config()))}
	}
	if vr.Wait && !peek {
		resp, err := s.engine.DecideWait(r.Context(), req)
		if err == nil {
			s.recordDecision(r.Context(), req.Domain, &req, &resp)
		}
		return resp, err
	}
	return s.decide(r.Context(), req, peek, nil)
}

func domainList(c *policy.Config) string {
	var names []string
	for _, d := range c.Domains() {
		names = append(names, fmt.Sprintf("%q", d.Name))
	}
	if len(names) == 0 {
		return "no domains"
	}
	return "domains " + strings.Join(names, ", ")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		writeError(w, http.StatusInternalServerError, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

// guardObserve lets through to h the /v1/observe requests that carry the
// observe token (WithObserveToken, else the admin token), or, with neither
// token set, those from a loopback peer: samples steer the adaptive limits,
// and the decision APIs' address is reachable by whoever the limits are
// meant to hold. A browser on the same host is such a peer, so without a
// token what a web page could send is refused too (browserSafe). A wrong
// or missing token is 401, a remote peer without a token to check 403,
// both naming what to set.
func (s *Server) guardObserve(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := s.tok.Load().observe
		if !browserSafe(w, r, "POST /v1/observe", tok == "") {
			return
		}
		if tok != "" {
			if !authorized(w, r, tok, "observe") {
				return
			}
		} else if !loopbackPeer(r) {
			writeError(w, http.StatusForbidden, "POST /v1/observe is taken from loopback peers only when no token is set: "+
				"set --observe-token (or --admin-token) and send Authorization: Bearer <token>, or post to /admin/api/observe on the admin address")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopbackPeer reports whether r came from a loopback address (127.0.0.0/8,
// ::1, or 127.x as an IPv4-mapped IPv6 address).
func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// V1Sample is a load signal sample for adaptive rules (POST /v1/observe).
type V1Sample struct {
	Domain    string  `json:"domain"`
	Rule      string  `json:"rule"`
	LatencyMS float64 `json:"latency_ms"`
	Failed    bool    `json:"failed,omitempty"`
}

// handleObserve feeds samples of the protected service's latency and errors
// to the adaptive controllers: {"domain","rule","latency_ms","failed"} or
// {"samples":[...]}; 204 on success, 404 naming the first sample whose
// domain or rule the configuration does not have.
func (s *Server) handleObserve(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	// The fields are spelled out rather than V1Sample embedded, so that a
	// message names a field as the client wrote it ("latency_ms", not
	// "V1Sample.latency_ms"); LatencyMS is a pointer to tell a sample
	// without a latency, refused, from one of 0ms.
	type sample struct {
		Domain    string   `json:"domain"`
		Rule      string   `json:"rule"`
		LatencyMS *float64 `json:"latency_ms"`
		Failed    bool     `json:"failed"`
	}
	var in struct {
		Domain    string   `json:"domain"`
		Rule      string   `json:"rule"`
		LatencyMS *float64 `json:"latency_ms"`
		Failed    bool     `json:"failed"`
		Samples   []sample `json:"samples"`
	}
	if err := decodeStrict(body, &in); err != nil {
		writeErr(w, err)
		return
	}
	samples := in.Samples
	single := false
	if in.Domain != "" || in.Rule != "" || in.LatencyMS != nil || in.Failed {
		samples = append(samples, sample{in.Domain, in.Rule, in.LatencyMS, in.Failed})
		single = len(samples) == 1
	}
	// name says which sample a message is about: "samples[i]" in a batch,
	// "the sample" when the body is one.
	name := func(i int) string {
		if single {
			return "the sample"
		}
		return fmt.Sprintf("samples[%d]", i)
	}
	if len(samples) == 0 {
		writeError(w, http.StatusBadRequest, "no sample: want {\"domain\",\"rule\",\"latency_ms\"} or {\"samples\":[...]}")
		return
	}
	if len(samples) > 10_000 {
		writeError(w, http.StatusBadRequest, "more than 10000 samples")
		return
	}
	for i, sm := range samples {
		switch {
		case sm.LatencyMS == nil:
			// A sample without a latency would count as 0ms and pull
			// the latency quantile down.
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: latency_ms: required (the request's latency in milliseconds, 0 <= latency_ms <= 1e9)", name(i)))
			return
		case sm.Domain == "" || sm.Rule == "" || !(*sm.LatencyMS >= 0) || *sm.LatencyMS > 1e9:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: want a domain, a rule and 0 <= latency_ms <= 1e9", name(i)))
			return
		}
	}
	// Each sample is recorded on its own; any naming a rule the
	// configuration does not have makes the answer a 404 naming it.
	var unknown []string
	for i, sm := range samples {
		if err := s.engine.Observe(sm.Domain, sm.Rule, time.Duration(*sm.LatencyMS*float64(time.Millisecond)), sm.Failed); err != nil {
			if len(samples) == 1 {
				writeErr(w, err)
				return
			}
			unknown = append(unknown, fmt.Sprintf("%s: %v", name(i), err))
		}
	}
	if len(unknown) > 0 {
		msg := unknown[0]
		if n := len(unknown) - 1; n > 0 {
			msg += fmt.Sprintf("; and %d more sample(s) of unknown rules", n)
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s; the other %d sample(s) were recorded", msg, len(samples)-len(unknown)))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
