package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem types of the bodies this package writes.
const (
	// TypeQuotaExceeded is the problem type of a 429: the quota-exceeded
	// type of draft-ietf-httpapi-ratelimit-headers-10 §5.1.
	TypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// TypeBlank is RFC 9457's default type: the status code says it all.
	TypeBlank = "about:blank"
)

// Problem is an RFC 9457 problem details object, the body of every response
// this package (and the gateway) writes itself.
type Problem struct {
	// Type identifies the kind of problem (a URI); TypeQuotaExceeded for
	// 429s.
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
	// quota-exceeded type defines; they are the policy names of the
	// RateLimit fields.
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// RetryAfter repeats the Retry-After field in seconds; absent when the
	// request can never pass.
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
