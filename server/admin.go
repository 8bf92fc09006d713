package server

import (
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/metrics"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/memcached"
	"github.com/floodgate/floodgate/store/resilient"
)

//go:embed dashboard.html
var dashboardFS embed.FS

// AdminHandler serves the --admin address:
//
//	GET  /metrics                       Prometheus metrics (open)
//	GET  /healthz                       200 while the process serves (open)
//	GET  /readyz                        200 when the config is loaded and the store answers (open)
//	GET  /dashboard                     live charts (the page asks for the token if one is set)
//	GET  /admin/api/config              the configuration in force
//	POST /admin/api/inspect             a request's state per descriptor, charging nothing
//	POST /admin/api/reset               forget the keys a request's descriptors use
//	GET|DELETE /admin/api/keys/{key}    a raw store key's state / reset it
//	GET  /admin/api/overrides           runtime overrides
//	PUT|DELETE /admin/api/overrides/{domain}/{rule}
//	GET  /admin/api/adaptive            adaptive rules and rate scales
//	PUT  /admin/api/scales/{domain}/{rule}
//	DELETE /admin/api/scales/{domain}/{rule}
//	POST /admin/api/observe             samples for the adaptive rules, as /v1/observe
//	GET  /admin/api/stats               the dashboard's summary
//	GET  /admin/api/events              recent reloads, adaptive steps, store changes
//
// Everything under /admin/api/ requires "Authorization: Bearer <token>"
// (the scheme in any case) when a token is set; without one it answers
// loopback peers only (403 to others), and on a loopback listener every
// path refuses a Host that is not an IP address or localhost. A path asked with a method
// it does not take is 405 with an Allow field. Paths are case-sensitive:
// the API under another spelling (/ADMIN/api/…, /admin%2Fapi/…) meets the
// token and browser checks, then answers 404 saying so; it is not
// redirected, so that no spelling but one works.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	mux.HandleFunc("GET /dashboard", s.handleDashboard)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/dashboard", http.StatusFound)
	})
	api := http.NewServeMux()
	api.HandleFunc("GET /admin/api/config", s.handleConfig)
	api.HandleFunc("POST /admin/api/inspect", s.handleInspect)
	api.HandleFunc("POST /admin/api/reset", s.handleReset)
	api.HandleFunc("GET /admin/api/keys/{key...}", s.handleKeyGet)
	api.HandleFunc("DELETE /admin/api/keys/{key...}", s.handleKeyDelete)
	api.HandleFunc("GET /admin/api/overrides", s.handleOverrides)
	api.HandleFunc("PUT /admin/api/overrides/{domain}/{rule...}", s.handleOverridePut)
	api.HandleFunc("DELETE /admin/api/overrides/{domain}/{rule...}", s.handleOverrideDelete)
	api.HandleFunc("GET /admin/api/adaptive", s.handleAdaptive)
	api.HandleFunc("PUT /admin/api/scales/{domain}/{rule...}", s.handleScalePut)
	api.HandleFunc("DELETE /admin/api/scales/{domain}/{rule...}", s.handleScaleDelete)
	api.HandleFunc("POST /admin/api/observe", s.handleObserve)
	api.HandleFunc("GET /admin/api/stats", s.handleStats)
	api.HandleFunc("GET /admin/api/events", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"events": s.Events()})
	})
	// A path without its last segment would otherwise be redirected to
	// the same path with a trailing slash (the {…...} patterns match an
	// empty rest), which then names an empty rule or key.
	for _, p := range []string{"PUT /admin/api/overrides/{domain}", "DELETE /admin/api/overrides/{domain}", "PUT /admin/api/scales/{domain}", "DELETE /admin/api/scales/{domain}"} {
		api.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { ruleParams(w, r) })
	}
	for _, p := range []string{"GET /admin/api/keys", "DELETE /admin/api/keys"} {
		api.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.keyParam(w, r) })
	}
	api.HandleFunc("/admin/api/", notFound(api, "/admin/api/", func(r *http.Request) string {
		return fmt.Sprintf("no admin endpoint %s %s", r.Method, r.URL.Path)
	}))
	mux.Handle("/admin/api/", s.requireToken(api))
	// The admin API under another spelling (/ADMIN/api/…, /admin%2Fapi/…)
	// is none of its paths, but it passes the API's checks before it is
	// told so: every request for what reads as the API, to this listener
	// or to a proxy in front that folds case or decodes %2F, meets the
	// token and the browser checks, and a client learns nothing from a
	// 404 that it could not learn from a 401.
	stray := s.requireToken(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s %s: paths are case-sensitive; the admin API is under /admin/api/ "+
			"(lower case, its segments separated by /, not %%2F)", r.Method, r.URL.EscapedPath()))
	}))
	rest := notFound(mux, "/", func(r *http.Request) string {
		msg := fmt.Sprintf("no such endpoint %s %s; see /dashboard, /metrics, /healthz, /readyz, /admin/api/", r.Method, r.URL.EscapedPath())
		if low := strings.ToLower(r.URL.Path); low != r.URL.Path {
			probe := r.Clone(r.Context())
			probe.Method, probe.URL.Path, probe.URL.RawPath = http.MethodGet, low, ""
			if _, pat := mux.Handler(probe); pat != "/" && pat != "" {
				msg += fmt.Sprintf(" (paths are case-sensitive: did you mean %s?)", low)
			}
		}
		return msg
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if adminAPIPath(r.URL.Path) {
			stray.ServeHTTP(w, r)
			return
		}
		rest(w, r)
	})
	return s.bodyDeadline(s.adminHostCheck(mux))
}

// adminHostCheck refuses, while no admin token is set, a request to a
// loopback admin listener addressed to a host name other than localhost,
// on every path (hostSafe): a page that re-points its own name at
// 127.0.0.1 (DNS rebinding) could otherwise read /metrics, /readyz and the
// dashboard of the operator's own host. A Prometheus on the same host
// addresses the listener by IP or as localhost, which pass. An admin
// address bound elsewhere (0.0.0.0, the pod's IP) is reached by probes and
// scrapes under names of their own, and serves only those routes to other
// hosts anyway; its admin API keeps the check (requireToken).
func (s *Server) adminHostCheck(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tok.Load().admin == "" && loopbackListener(r) && !hostSafe(w, r, "the admin address") {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// adminAPIPath reports whether path, decoded, reads as the admin API's in
// any case: /admin/api or under /admin/api/. The ServeMux routes only the
// exact spelling to the API (segment by segment, %2F inside a segment), so
// the others reach the catch-all, which must still guard them.
func adminAPIPath(path string) bool {
	const prefix = "/admin/api"
	if len(path) < len(prefix) || !strings.EqualFold(path[:len(prefix)], prefix) {
		return false
	}
	return len(path) == len(prefix) || path[len(prefix)] == '/'
}

// allowMethods are the methods a 405's Allow field may name.
var allowMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch}

// notFound is the handler of mux's catch-all pattern: a path that another
// pattern of mux serves for other methods is answered 405 with an Allow
// field naming them (the catch-all would otherwise hide the ServeMux's own
// 405), any other path 404 with msg(r).
func notFound(mux *http.ServeMux, catchAll string, msg func(r *http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range allowMethods {
			if m == r.Method {
				continue
			}
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pat := mux.Handler(probe); pat != "" && pat != catchAll {
				allow = append(allow, m)
			}
		}
		if len(allow) == 0 {
			writeError(w, http.StatusNotFound, msg(r))
			return
		}
		list := strings.Join(allow, ", ")
		w.Header().Set("Allow", list)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: method not allowed; this path takes %s", r.Method, r.URL.Path, list))
	}
}

// authorized reports whether r carries token (the kind's: "admin",
// "observe"); if not, it answers 401 with a Bearer challenge for the
// realm floodgate-<kind>.
func authorized(w http.ResponseWriter, r *http.Request, token, kind string) bool {
	msg := checkToken(r.Header.Get("Authorization"), token, kind)
	if msg == "" {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate-`+kind+`"`)
	writeError(w, http.StatusUnauthorized, msg)
	return false
}

// requireToken guards h with the admin token, compared in constant time.
// The scheme name is case-insensitive (RFC 9110 §11.1): "bearer tok" is
// accepted. The 401 says what is wrong without echoing the header. Without
// a token, the API answers loopback peers only (an admin address bound to
// 0.0.0.0 or the pod's IP for probes would otherwise open reset, overrides,
// scales and observe to the network; its other routes stay open), and what
// a web page could send is refused (browserSafe): a request from another
// site that changes something, and any request addressed to a host name
// other than localhost.
func (s *Server) requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := s.tok.Load().admin
		if tok == "" && !loopbackPeer(r) {
			writeError(w, http.StatusForbidden, "the admin API answers loopback peers only when no admin token is set: "+
				"set --admin-token (or --admin-token-file) and send Authorization: Bearer <token> to use it from another host")
			return
		}
		if !browserSafe(w, r, "the admin API", tok == "") {
			return
		}
		if tok != "" {
			if !authorized(w, r, tok, "admin") {
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// checkToken returns why the Authorization field auth does not carry
// token, or "" when it does; name says which token it is ("admin",
// "observe") in the message.
func checkToken(auth, token, name string) string {
	if strings.TrimSpace(auth) == "" {
		return fmt.Sprintf("missing Authorization: Bearer <%s-token>", name)
	}
	scheme, tok, _ := strings.Cut(strings.TrimSpace(auth), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return fmt.Sprintf("the Authorization field does not use the Bearer scheme: want Authorization: Bearer <%s-token>", name)
	}
	if strings.TrimSpace(tok) == "" {
		// "Bearer" with nothing after it: an unset variable in the
		// caller's script (-H "Authorization: Bearer $TOKEN").
		return fmt.Sprintf("missing %s token: the Authorization field says Bearer with no token; want Authorization: Bearer <%s-token>", name, name)
	}
	if subtle.ConstantTimeCompare([]byte(strings.TrimLeft(tok, " ")), []byte(token)) != 1 {
		return fmt.Sprintf("wrong %s token", name)
	}
	return ""
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, "draining")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

// handleReadyz answers 200 when the configuration is loaded and the store
// is ready (CheckStore: it answers a ping now, or failed fewer pings in a
// row than WithReadiness allows), else 503 with the reason. On a store with
// one breaker per partition (partitionReport) the answer also counts and
// names the open breakers, which do not change it: the ping reaches one
// partition, and one dead node of many must not take a fleet out.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.draining.Load():
		writeError(w, http.StatusServiceUnavailable, "not ready: draining")
	case s.stopping.Load():
		writeError(w, http.StatusServiceUnavailable, "not ready: shutting down")
	case s.engine.Config() == nil:
		writeError(w, http.StatusServiceUnavailable, "not ready: no configuration loaded")
	default:
		ready, err := s.checkStore(r.Context())
		parts := s.partitionReport(!ready)
		if !ready {
			writeError(w, http.StatusServiceUnavailable, "not ready: store does not answer: "+keyless(err)+parts)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ready" + parts + "\n"))
	}
}

// maxReadyzPartitions bounds the open partitions /readyz names.
const maxReadyzPartitions = 3

// partitionReport is what /readyz adds about a store with one breaker per
// partition (a Redis Cluster's slot ranges, a memcached ring's servers),
// whose readiness ping reaches one partition only: "" for a store with one
// breaker or, when ready, with none open; else "; 1 of 3 store
// partitions' breakers open (server 10.0.0.9:11211)", the open ones named
// (at most maxReadyzPartitions). notReady adds which partition the
// default ping reaches and how many others' breakers are closed, so that
// a 503 from one dead server of many says that the rest still answer.
// Half-open breakers count as open: the failure policy answers their keys
// but for one probe call (floodgate_circuit_open_partitions counts them
// alike).
func (s *Server) partitionReport(notReady bool) string {
	rs, ok, _ := store.Under[*resilient.Store](s.store)
	if !ok || rs.Unwrap() == nil {
		return ""
	}
	brs := rs.Breakers()
	if len(brs) < 2 {
		return ""
	}
	part, ok, _ := store.Under[store.Partitioner](rs.Unwrap())
	if ok && part.Partitions() != len(brs) {
		ok = false
	}
	name := func(p int) string {
		if ok {
			if n := part.PartitionName(p); n != "" {
				return n
			}
		}
		return fmt.Sprintf("partition %d", p)
	}
	var open []string
	for p, st := range brs {
		if st != resilient.Closed {
			open = append(open, name(p))
		}
	}
	if len(open) == 0 && !notReady {
		return ""
	}
	var b strings.Builder
	b.WriteString("; ")
	if notReady && ok && s.defaultPing {
		p := part.Partition(resilient.PingKey)
		if p < 0 || p >= len(brs) {
			p = 0
		}
		closed := len(brs) - len(open)
		if brs[p] == resilient.Closed {
			closed--
		}
		fmt.Fprintf(&b, "the readiness ping reaches %s only, and %d of the other %d store partitions' breakers are closed; ",
			name(p), closed, len(brs)-1)
	}
	fmt.Fprintf(&b, "%d of %d store partitions' breakers open", len(open), len(brs))
	if len(open) > 0 {
		shown := open[:min(len(open), maxReadyzPartitions)]
		b.WriteString(" (" + strings.Join(shown, ", "))
		if more := len(open) - len(shown); more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
		b.WriteString(")")
	}
	return b.String()
}

func (s *Server) handleDashboard(w http.ResponseWriter, r *http.Request) {
	b, _ := dashboardFS.ReadFile("dashboard.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// frame-ancestors 'none' (and X-Frame-Options for older browsers):
	// no other site's page may frame the dashboard to make the operator
	// click on it.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Write(b)
}

// ConfigView is the admin API's view of the configuration in force.
type ConfigView struct {
	Path    string `json:"path,omitempty"`
	Version uint64 `json:"version"`
	// LastReload is the outcome of the last reload attempt (ConfigReloaded),
	// nil before the first: when it failed, the configuration on disk is
	// not the one in force, which stays the previous one.
	LastReload *ReloadView  `json:"last_reload,omitempty"`
	Domains    []DomainView `json:"domains"`
	// Dump is the compiled configuration as text, one line per descriptor.
	Dump string `json:"dump"`
}

// ReloadView is a configuration reload attempt's outcome.
type ReloadView struct {
	Time time.Time `json:"time"`
	OK   bool      `json:"ok"`
	// Problems says why a failed reload was refused: each problem of the
	// configuration as "file:line: message", or the error's text.
	Problems []string `json:"problems,omitempty"`
}

// ConfigReloaded records a reload attempt of the configuration, for
// /admin/api/config's last_reload: err is why it failed (policy.Problems
// or another error), nil when the new configuration is in force.
// floodgate serve calls it after every reload, hot or on SIGHUP.
func (s *Server) ConfigReloaded(err error) {
	v := &ReloadView{Time: time.Now().UTC(), OK: err == nil}
	if ps, ok := errors.AsType[policy.Problems](err); ok {
		for _, p := range ps {
			v.Problems = append(v.Problems, p.String())
		}
	} else if err != nil {
		v.Problems = []string{err.Error()}
	}
	s.lastReload.Store(v)
	if err == nil {
		s.recordFactors("", "")
	}
}

// recordFactors sets floodgate_adaptive_rate_factor to the factor in
// force of the adaptive rules (of domain/rule only, when domain is not
// ""): at start, after a reload and after a manual scale; the steps record
// their own (serve's RunAdaptive report).
func (s *Server) recordFactors(domain, rule string) {
	for _, a := range s.engine.AdaptiveRules() {
		if domain == "" || (a.Domain == domain && a.Rule == rule) {
			s.metrics.RateFactor(a.Domain, a.Rule, a.Factor)
		}
	}
}

// DomainView lists a domain's rules.
type DomainView struct {
	Name  string     `json:"name"`
	Rules []RuleView `json:"rules"`
}

// RuleView is one rule as configured and as in force.
type RuleView struct {
	Name      string `json:"name"`
	Path      string `json:"path,omitempty"`
	Where     string `json:"where,omitempty"`
	Limit     string `json:"limit,omitempty"`
	Effective string `json:"effective,omitempty"`
	Unlimited bool   `json:"unlimited,omitempty"`
	// Deny marks a requests_per_unit: 0 rule: it refuses every request
	// (Limit and Effective are empty: it has no limit to state).
	Deny     bool   `json:"deny,omitempty"`
	Shadow   bool   `json:"shadow,omitempty"`
	Strategy string `json:"strategy,omitempty"`
}

func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	cfg, effective := s.engine.EffectiveLimits()
	v := ConfigView{Path: s.configPath, Version: s.engine.Version(), LastReload: s.lastReload.Load(), Dump: cfg.Dump()}
	for _, d := range cfg.Domains() {
		dv := DomainView{Name: d.Name}
		for _, rule := range d.Rules() {
			rv := RuleView{Name: rule.Name, Path: rule.Path, Where: rule.Pos.String(), Unlimited: rule.Unlimited,
				Deny: rule.Deny, Shadow: rule.Shadow, Strategy: rule.Strategy}
			if l := rule.Limit(); l != nil {
				rv.Limit = l.String()
			}
			if l := effective(rule); l != nil {
				rv.Effective = l.String()
			}
			dv.Rules = append(dv.Rules, rv)
		}
		v.Domains = append(v.Domains, dv)
	}
	writeJSON(w, http.StatusOK, v)
}

// adminRequest reads a native request from an admin body.
func (s *Server) adminRequest(w http.ResponseWriter, r *http.Request) (policy.Request, bool) {
	body, err := s.readBody(w, r)
	if err != nil {
		writeErr(w, err)
		return policy.Request{}, false
	}
	var vr V1Request
	if err := decodeStrict(body, &vr); err != nil {
		writeErr(w, err)
		return policy.Request{}, false
	}
	req, err := vr.toPolicy()
	if err == nil {
		err = s.limits.check(&req)
	}
	if err == nil && s.engine.Config().Domain(req.Domain) == nil {
		err = &httpError{http.StatusNotFound, fmt.Sprintf("unknown domain %q (the configuration has %s)", req.Domain, domainList(s.engine.Config()))}
	}
	if err != nil {
		writeErr(w, err)
		return policy.Request{}, false
	}
	return req, true
}

// KeyState is a raw store key's state.
type KeyState struct {
	Key    string  `json:"key"`
	Exists bool    `json:"exists"`
	State  []int64 `json:"state,omitempty"`
	Error  string  `json:"error,omitempty"`
	// Warning says that the store may have missed state of the key: on a
	// store.RequestInspector (memcached), a key that names no state layout
	// keyWindowLimit can read, whose window counters only the instances
	// that used its limit can find.
	Warning string `json:"warning,omitempty"`
}

// limitUnknown is the warning of a key whose window counters a
// store.RequestInspector may not find.
const limitUnknown = "the store (memcached) names window counters after their window, and this key names no limit " +
	"(#fixed_window:… or #sliding_window:…) to find them: counters written by instances that did not use its limit " +
	"since they started are not seen or reset here"

func (s *Server) keyState(r *http.Request, key string) KeyState {
	ks := KeyState{Key: key}
	var st algo.State
	var found bool
	var err error
	ri := s.requestInspector()
	l, known := keyWindowLimit(key)
	switch in, ok := s.store.(store.Inspector); {
	case ri != nil && l != nil:
		st, found, err = ri.InspectRequest(r.Context(), store.Request{Key: key, Limit: l})
	case !ok:
		ks.Error = "the store cannot inspect keys"
		return ks
	default:
		st, found, err = in.Inspect(r.Context(), key)
		if ri != nil && !known && !found {
			ks.Warning = limitUnknown
		}
	}
	if err != nil {
		ks.Error = err.Error()
		return ks
	}
	ks.Exists = found
	if found {
		ks.State = append([]int64{st.A, st.B, st.C}, st.Ext...)
	}
	return ks
}

// resetKeys forgets keys on the store and, on a store.RequestInspector,
// the window counters their limits name. It returns the warning to
// answer ("" when the reset is complete).
func (s *Server) resetKeys(r *http.Request, keys []string) (warning string, err error) {
	if err := s.store.Reset(r.Context(), keys...); err != nil {
		return "", err
	}
	ri := s.requestInspector()
	if ri == nil {
		return "", nil
	}
	var reqs []store.Request
	var unknown []string
	for _, k := range keys {
		switch l, known := keyWindowLimit(k); {
		case l != nil:
			reqs = append(reqs, store.Request{Key: k, Limit: l})
		case !known:
			unknown = append(unknown, k)
		}
	}
	if len(reqs) > 0 {
		if err := ri.ResetRequests(r.Context(), reqs); err != nil {
			return "", err
		}
	}
	if len(unknown) > 0 {
		return fmt.Sprintf("%s (%s)", limitUnknown, strings.Join(unknown, ", ")), nil
	}
	return "", nil
}

// handleInspect answers a request's state without charging: the decision
// Peek makes, and the raw state of each store key involved.
func (s *Server) handleInspect(w http.ResponseWriter, r *http.Request) {
	req, ok := s.adminRequest(w, r)
	if !ok {
		return
	}
	resp, err := s.engine.Peek(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	keys, err := s.engine.Keys(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	states := make([]KeyState, 0, len(keys))
	for _, k := range keys {
		states = append(states, s.keyState(r, k))
	}
	writeJSON(w, http.StatusOK, struct {
		Decision V1Response `json:"decision"`
		Keys     []KeyState `json:"keys"`
	}{s.v1Response(&resp), states})
}

// handleReset forgets every store key a request's descriptors use.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	req, ok := s.adminRequest(w, r)
	if !ok {
		return
	}
	keys, err := s.engine.Keys(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	var warning string
	if len(keys) > 0 {
		if warning, err = s.resetKeys(r, keys); err != nil {
			writeError(w, http.StatusServiceUnavailable, "reset failed: "+err.Error())
			return
		}
	}
	s.Event("reset", fmt.Sprintf("reset %d keys of domain %q", len(keys), req.Domain))
	if keys == nil {
		keys = []string{} // "reset": [], not null
	}
	out := map[string]any{"reset": keys}
	if warning != "" {
		out["warning"] = warning
	}
	writeJSON(w, http.StatusOK, out)
}

// keyParam returns the raw store key of a /admin/api/keys/{key} request,
// or answers 400 and returns false when the path names none or a key
// outside the engine's key prefix: on a store shared with other
// applications, the admin API reaches only Floodgate's keys.
func (s *Server) keyParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.PathValue("key")
	if key == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("no key: want %s /admin/api/keys/{key}, the key percent-encoded", r.Method))
		return "", false
	}
	if p := s.engine.KeyPrefix(); !strings.HasPrefix(key, p) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("key %q is not a Floodgate key: the admin API reaches only keys under the key prefix %q", key, p))
		return "", false
	}
	return key, true
}

// ruleParams returns the domain and rule of a
// /admin/api/{overrides,scales}/{domain}/{rule} request, or answers 400
// and returns false when the path names no rule.
func ruleParams(w http.ResponseWriter, r *http.Request) (domain, rule string, ok bool) {
	domain, rule = r.PathValue("domain"), r.PathValue("rule")
	if rule == "" {
		what, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/admin/api/"), "/")
		writeError(w, http.StatusBadRequest, fmt.Sprintf("no rule name: want %s /admin/api/%s/{domain}/{rule}", r.Method, what))
		return "", "", false
	}
	return domain, rule, true
}

func (s *Server) handleKeyGet(w http.ResponseWriter, r *http.Request) {
	key, ok := s.keyParam(w, r)
	if !ok {
		return
	}
	ks := s.keyState(r, key)
	code := http.StatusOK
	if ks.Error != "" {
		code = http.StatusServiceUnavailable
	} else if !ks.Exists {
		code = http.StatusNotFound
	}
	writeJSON(w, code, ks)
}

// handleKeyDelete resets one raw key: 204, or 200 with a warning when the
// store may have kept some of its state (resetKeys).
func (s *Server) handleKeyDelete(w http.ResponseWriter, r *http.Request) {
	key, ok := s.keyParam(w, r)
	if !ok {
		return
	}
	warning, err := s.resetKeys(r, []string{key})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "reset failed: "+err.Error())
		return
	}
	s.Event("reset", "reset key "+keyShape(key))
	if warning != "" {
		writeJSON(w, http.StatusOK, map[string]any{"reset": []string{key}, "warning": warning})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keyShape is a store key as the admin API's log lines and events show
// it: its domain, descriptor keys and limit, every descriptor value (a
// client's address, an API key) and the digest of a descriptor's values
// (|%P…) left out, as the store log lines leave keys out:
// "fg:api|remote_address=…#token_bucket:60000000". Values are
// percent-encoded in keys, so '|', '=' and '#' inside them do not cut.
func keyShape(key string) string {
	head, limit, hasLimit := strings.Cut(key, "#")
	parts := strings.Split(head, "|")
	for i := 1; i < len(parts); i++ {
		switch k, _, ok := strings.Cut(parts[i], "="); {
		case ok:
			parts[i] = k + "=…"
		case strings.HasPrefix(parts[i], "%P"):
			parts[i] = "%P…"
		}
	}
	out := strings.Join(parts, "|")
	if hasLimit {
		out += "#" + limit
	}
	return out
}

// OverrideView is a runtime override in the admin API.
type OverrideView struct {
	Domain          string `json:"domain"`
	Rule            string `json:"rule"`
	RequestsPerUnit int64  `json:"requests_per_unit"`
	Period          string `json:"period,omitempty"`
	Burst           int64  `json:"burst,omitempty"`
	Active          bool   `json:"active"`
}

func (s *Server) overrideList() []OverrideView {
	out := []OverrideView{}
	for _, o := range s.engine.Overrides() {
		v := OverrideView{Domain: o.Domain, Rule: o.Rule, RequestsPerUnit: o.RequestsPerUnit, Burst: o.Burst, Active: o.Active}
		if o.Period > 0 {
			v.Period = o.Period.String()
		}
		out = append(out, v)
	}
	return out
}

func (s *Server) handleOverrides(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"overrides": s.overrideList()})
}

// handleOverridePut sets a rule's override from
// {"requests_per_unit": N, "period": "30s", "burst": N}.
func (s *Server) handleOverridePut(w http.ResponseWriter, r *http.Request) {
	domain, rule, ok := ruleParams(w, r)
	if !ok {
		return
	}
	body, err := s.readBodyAny(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	var in struct {
		RequestsPerUnit int64  `json:"requests_per_unit"`
		Period          string `json:"period"`
		Burst           int64  `json:"burst"`
	}
	if err := decodeStrict(body, &in); err != nil {
		if hint := overrideHint(body, err); hint != "" {
			err = badInput("%s", hint)
		}
		writeErr(w, err)
		return
	}
	o := policy.Override{RequestsPerUnit: in.RequestsPerUnit, Burst: in.Burst}
	if in.Period != "" {
		d, cal, ok := policy.ParseUnit(in.Period)
		switch {
		case ok && cal != algo.CalendarNone:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("period %q: an override takes a fixed period (second, minute, hour, day, week or a duration like 720h), not a calendar one", in.Period))
			return
		case !ok:
			if f, nerr := strconv.ParseFloat(strings.TrimSpace(in.Period), 64); nerr == nil && f > 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("period %q: a duration needs a unit, e.g. \"period\": \"%ss\" for seconds; or second, minute, hour, day, week", in.Period, strings.TrimSpace(in.Period)))
				return
			}
			if d, err = time.ParseDuration(in.Period); err != nil || d <= 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("period %q: want second, minute, hour, day, week or a duration like 30s", in.Period))
				return
			}
		}
		o.Period = d
	}
	if err := s.engine.SetOverride(domain, rule, o); err != nil {
		writeErr(w, err)
		return
	}
	s.Event("override", fmt.Sprintf("override %s/%s: %d per %s", domain, rule, o.RequestsPerUnit, periodText(o.Period)))
	out := map[string]any{"overrides": s.overrideList()}
	if ws := s.itemSizeWarnings(domain, rule); len(ws) > 0 {
		for _, m := range ws {
			s.Warn("override", m)
		}
		out["warnings"] = ws
	}
	writeJSON(w, http.StatusOK, out)
}

// itemSizeWarnings says, on a memcached store, of each rule named rule
// in domain whose limit now in force (its override applied) keeps more
// state a key than the servers' item size limit: its keys would fail
// their decisions once their state outgrows an item. floodgate serve
// says the same of the configured limits at start and on reload.
func (s *Server) itemSizeWarnings(domain, rule string) []string {
	ms, ok, _ := store.Under[*memcached.Store](s.store)
	if !ok {
		return nil
	}
	cfg, effective := s.engine.EffectiveLimits()
	d := cfg.Domain(domain)
	if d == nil {
		return nil
	}
	var out []string
	for _, r := range d.Rules() {
		l := effective(r)
		if r.Name != rule || l == nil {
			continue
		}
		if size := ms.MaxStateSize(l); size > ms.MaxItemSize() {
			out = append(out, fmt.Sprintf("override %s/%s: %s with a limit of %d keeps up to %d bytes a key in one memcached item, over the servers' item size limit of %d bytes: "+
				"a key whose state outgrows it fails its decisions (bad request, whatever --on-store-error says); lower the override, raise memcached's -I, or use another algorithm (docs/STORES.md)",
				domain, rule, l.Algorithm(), l.Params().Limit, size, ms.MaxItemSize()))
		}
	}
	return out
}

// overrideField returns, for a field an override PUT does not take, the
// override's field to write instead: for the configuration's unit and
// unit_multiplier, period; for a synonym of a rate_limit field (policy's
// list), that field, period where the configuration's would be unit (an
// override states its period whole); "" for any other name.
func overrideField(name string) string {
	switch name {
	case "unit", "unit_multiplier":
		return "period"
	case "requests_per_period":
		return "requests_per_unit"
	}
	if f := policy.RateLimitFieldSynonym(name); f != "unit" {
		return f
	}
	return "period"
}

// overrideHint says what to write instead when decodeStrict refused an
// override PUT's body, err, for a field of the configuration's rate_limit
// the override names otherwise (unit: period), a synonym, a rate_limit
// object, or a period given as a JSON number; "" for any other error.
func overrideHint(body []byte, err error) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return ""
	}
	text := err.Error()
	str := func(name string) (string, bool) {
		var v string
		return v, json.Unmarshal(fields[name], &v) == nil
	}
	if strings.Contains(text, `field "period": want a string`) {
		v := strings.TrimSpace(string(fields["period"]))
		if f, err := strconv.ParseFloat(v, 64); err != nil || f <= 0 {
			v = "30"
		}
		return fmt.Sprintf(`field "period": want a string, a unit or a duration with its unit: "period": "%ss" for %s seconds, or "period": "minute"`, v, v)
	}
	if strings.Contains(text, `unknown field "rate_limit"`) {
		return `unknown field "rate_limit": an override's fields go at the top level, not in a rate_limit object: {"requests_per_unit": 100, "period": "minute", "burst": 20} (period and burst optional)`
	}
	if name, ok := unknownField(text); ok {
		use := overrideField(name)
		if use == "" {
			return ""
		}
		if use == "requests_per_unit" {
			return fmt.Sprintf(`unknown field %q: an override's number of requests per period is "requests_per_unit", e.g. "requests_per_unit": 100`, name)
		}
		example := `"period": "minute" or "period": "30s"`
		unit, isStr := str("unit")
		if d, cal, ok := policy.ParseUnit(unit); isStr && ok && cal == algo.CalendarNone {
			var n int64 = 1
			if json.Unmarshal(fields["unit_multiplier"], &n) != nil || n < 1 {
				n = 1
			}
			if n == 1 {
				example = fmt.Sprintf(`"period": %q`, unit)
			} else {
				example = fmt.Sprintf(`"period": %q (%d %ss)`, (time.Duration(n) * d).String(), n, strings.ToLower(unit))
			}
		}
		if name == "unit" || name == "unit_multiplier" {
			return fmt.Sprintf(`unknown field %q: an override gives its period as "period", a unit (second, minute, hour, day, week) or a duration, with unit_multiplier folded in: %s`, name, example)
		}
		return fmt.Sprintf(`unknown field %q: an override's period is "period", a unit (second, minute, hour, day, week) or a duration: %s`, name, example)
	}
	return ""
}

// unknownField returns the field name of encoding/json's `unknown field
// "name"` error text.
func unknownField(text string) (string, bool) {
	const mark = `unknown field "`
	i := strings.Index(text, mark)
	if i < 0 {
		return "", false
	}
	name, _, ok := strings.Cut(text[i+len(mark):], `"`)
	return name, ok
}

func periodText(d time.Duration) string {
	if d == 0 {
		return "configured period"
	}
	return d.String()
}

func (s *Server) handleOverrideDelete(w http.ResponseWriter, r *http.Request) {
	domain, rule, ok := ruleParams(w, r)
	if !ok {
		return
	}
	had, err := s.engine.RemoveOverride(domain, rule)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !had {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no override for %s/%s", domain, rule))
		return
	}
	s.Event("override", fmt.Sprintf("override %s/%s removed", domain, rule))
	w.WriteHeader(http.StatusNoContent)
}

// ScaleView is a rule's rate scale.
type ScaleView struct {
	Domain string    `json:"domain"`
	Rule   string    `json:"rule"`
	Factor float64   `json:"factor"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// Manual: set through PUT /admin/api/scales (on an adaptive rule it
	// pauses the controller until removed).
	Manual bool `json:"manual,omitempty"`
}

func scaleViews(in []policy.RateScale) []ScaleView {
	out := []ScaleView{}
	for _, s := range in {
		out = append(out, ScaleView(s))
	}
	return out
}

// AdaptiveView is an adaptive rule as GET /admin/api/adaptive shows it.
type AdaptiveView struct {
	ScaleView
	// Status is "active", or "paused by a manual scale: <reason>".
	Status string `json:"status"`
	// Controller is the controller's own factor.
	Controller float64 `json:"controller_factor"`
	// Settings are the adaptive block's, with the defaults filled in.
	Settings AdaptiveSettings `json:"settings"`
	// LastStep is the last step, moved or not; absent before the first.
	LastStep *StepView `json:"last_step,omitempty"`
	// Samples counts the samples of the interval in progress.
	Samples int64 `json:"samples_in_window"`
	// NextStep is when the next step is due; absent: at the next tick.
	NextStep time.Time `json:"next_step,omitzero"`
}

// AdaptiveSettings is an adaptive block with its defaults filled in.
type AdaptiveSettings struct {
	Min              float64 `json:"min"`
	Max              float64 `json:"max"`
	Initial          float64 `json:"initial"`
	LatencyThreshold string  `json:"latency_threshold,omitempty"`
	Quantile         float64 `json:"quantile"`
	ErrorRatio       float64 `json:"error_ratio,omitempty"`
	Decrease         float64 `json:"decrease"`
	Increase         float64 `json:"increase"`
	Interval         string  `json:"interval"`
	MinSamples       int64   `json:"min_samples"`
}

// StepView is one step of an adaptive controller.
type StepView struct {
	At         time.Time `json:"at"`
	Old        float64   `json:"old"`
	New        float64   `json:"new"`
	Reason     string    `json:"reason"`
	Overloaded bool      `json:"overloaded,omitempty"`
	Samples    int64     `json:"samples"`
	Errors     int64     `json:"errors"`
	Latency    string    `json:"latency,omitempty"`
}

func (s *Server) handleAdaptive(w http.ResponseWriter, r *http.Request) {
	states := s.engine.AdaptiveStates()
	views := make([]AdaptiveView, 0, len(states))
	for _, st := range states {
		c := st.Settings
		v := AdaptiveView{ScaleView: ScaleView(st.RateScale), Status: st.Status, Controller: st.Controller,
			Samples: st.Pending, NextStep: st.Next, Settings: AdaptiveSettings{Min: c.Min, Max: c.Max, Initial: c.Initial,
				Quantile: c.Quantile, ErrorRatio: c.ErrorRatio, Decrease: c.Decrease, Increase: c.Increase,
				Interval: c.Interval.String(), MinSamples: c.MinSamples}}
		if c.LatencyThreshold > 0 {
			v.Settings.LatencyThreshold = c.LatencyThreshold.String()
		}
		if l := st.Last; !l.At.IsZero() {
			v.LastStep = &StepView{At: l.At, Old: l.Old, New: l.New, Reason: l.Reason, Overloaded: l.Overloaded, Samples: l.Samples, Errors: l.Errors}
			if l.Latency > 0 {
				v.LastStep.Latency = l.Latency.String()
			}
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"adaptive": views,
		"scales":   scaleViews(s.engine.RateScales()),
	})
}

// handleScalePut sets a rule's rate factor by hand: {"factor": 0.5,
// "reason": "incident 42"}; factor 1 removes the scale. On an adaptive
// rule a manual scale pauses the controller until it is removed.
func (s *Server) handleScalePut(w http.ResponseWriter, r *http.Request) {
	domain, rule, ok := ruleParams(w, r)
	if !ok {
		return
	}
	body, err := s.readBodyAny(w, r)
	if err != nil {
		writeErr(w, err)
		return
	}
	var in struct {
		Factor float64 `json:"factor"`
		Reason string  `json:"reason"`
	}
	if err := decodeStrict(body, &in); err != nil {
		writeErr(w, err)
		return
	}
	reason := in.Reason
	if reason == "" {
		reason = "set through the admin API"
	}
	if in.Factor == 1 {
		if _, err := s.removeScale(domain, rule); err != nil {
			writeErr(w, err)
			return
		}
	} else {
		if err := s.engine.SetRateScale(domain, rule, in.Factor, reason); err != nil {
			writeErr(w, err)
			return
		}
		msg := fmt.Sprintf("scale %s/%s = %v: %s", domain, rule, in.Factor, reason)
		if s.isAdaptive(domain, rule) {
			msg += " (the adaptive controller is paused until the scale is removed)"
		}
		s.Event("scale", msg)
		s.recordFactors(domain, rule)
	}
	writeJSON(w, http.StatusOK, map[string]any{"scales": scaleViews(s.engine.RateScales())})
}

// handleScaleDelete removes a rule's manual scale: 204, or 404 when it
// has none.
func (s *Server) handleScaleDelete(w http.ResponseWriter, r *http.Request) {
	domain, rule, ok := ruleParams(w, r)
	if !ok {
		return
	}
	had, err := s.removeScale(domain, rule)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !had {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no manual scale for %s/%s", domain, rule))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// removeScale removes a manual scale, says so in the events and the
// factor gauge, and reports whether there was one.
func (s *Server) removeScale(domain, rule string) (bool, error) {
	had, err := s.engine.RemoveRateScale(domain, rule)
	if err != nil || !had {
		return had, err
	}
	msg := fmt.Sprintf("scale %s/%s removed", domain, rule)
	for _, a := range s.engine.AdaptiveRules() {
		if a.Domain == domain && a.Rule == rule {
			msg += fmt.Sprintf(": the adaptive controller resumes at %v", a.Factor)
		}
	}
	s.Event("scale", msg)
	s.recordFactors(domain, rule)
	return true, nil
}

// isAdaptive reports whether domain/rule has an adaptive block.
func (s *Server) isAdaptive(domain, rule string) bool {
	for _, a := range s.engine.AdaptiveRules() {
		if a.Domain == domain && a.Rule == rule {
			return true
		}
	}
	return false
}

// readBodyAny is readBody for methods other than POST.
func (s *Server) readBodyAny(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	m := r.Method
	r.Method = http.MethodPost
	defer func() { r.Method = m }()
	return s.readBody(w, r)
}

// Stats is the dashboard's poll.
type Stats struct {
	metrics.Summary
	Version   uint64 `json:"config_version"`
	Overrides int    `json:"overrides"`
	// OverrideList is the runtime overrides (Overrides counts them).
	OverrideList []OverrideView `json:"override_list"`
	Scales       []ScaleView    `json:"scales"`
	StoreUp      bool           `json:"store_up"`
	Events       []Event        `json:"events"`
	Uptime       time.Duration  `json:"uptime_ns"`
	// Region is the state of several regions (store/region); null
	// without them.
	Region *RegionView `json:"region"`
}

// RegionView is this region and its peers as the admin API's stats show
// them.
type RegionView struct {
	Name string `json:"name"`
	// Weights are every region's weight, by name; Fingerprint is theirs,
	// which every region must share.
	Weights     map[string]int64 `json:"weights"`
	Fingerprint string           `json:"fingerprint"`
	// Borrowed counts the decisions peers lent; PeerFailures the peer
	// calls that failed.
	Borrowed     int64      `json:"borrowed"`
	PeerFailures int64      `json:"peer_failures"`
	Peers        []PeerView `json:"peers"`
}

// PeerView is a peer region: Up is false from a failed call to it until a
// call (a borrowing or a probe) answers.
type PeerView struct {
	Name string `json:"name"`
	Up   bool   `json:"up"`
}

// regionView returns the regions' state, nil without them.
func (s *Server) regionView() *RegionView {
	if s.region == nil {
		return nil
	}
	names, weights, fp := s.region.Regions()
	st := s.region.Stats()
	v := &RegionView{Name: s.region.Self(), Weights: map[string]int64{}, Fingerprint: fp,
		Borrowed: st.Borrowed, PeerFailures: st.PeerFailures, Peers: []PeerView{}}
	for i, n := range names {
		v.Weights[n] = weights[i]
	}
	for _, p := range st.Peers {
		v.Peers = append(v.Peers, PeerView{Name: p.Name, Up: !p.Down})
	}
	return v
}

var started = time.Now()

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	ev := s.Events()
	if len(ev) > 20 {
		ev = ev[len(ev)-20:]
	}
	ov := s.overrideList()
	writeJSON(w, http.StatusOK, Stats{Summary: s.metrics.Summary(), Version: s.engine.Version(), Overrides: len(ov), OverrideList: ov,
		Scales: scaleViews(s.engine.RateScales()), StoreUp: s.storeState.Load() == storeUp, Events: ev, Uptime: time.Since(started),
		Region: s.regionView()})
}
