package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/headers"
)

// CORSSpec is the cors: block of a gateway section, for an API that
// browser code calls from pages of other origins:
//
//	gateway:
//	  cors:
//	    allow_origins: ["https://app.example.com", "https://*.example.org"]
//	  routes: ...
//
// With it, a CORS preflight (OPTIONS with Origin and
// Access-Control-Request-Method) from an allowed origin that matches one
// of the section's routes is proxied without being limited, unless
// LimitPreflights; and the gateway's own answers to a request from an
// allowed origin (its refusals, its 400s, its 502s and 504s) carry
// Access-Control-Allow-Origin and Access-Control-Expose-Headers listing
// the rate limit fields and Retry-After, so that browser code can read the
// status and when to retry; every answer of its own under the block has
// Vary: Origin, as it differs by origin. The upstream owns its CORS policy:
// the gateway never adds Access-Control-Allow-Origin to an upstream's
// answer, it only appends its fields to the Access-Control-Expose-Headers
// of one that allows the origin already.
type CORSSpec struct {
	// AllowOrigins lists the origins whose requests get the gateway's
	// CORS fields: "scheme://host[:port]" exactly as a browser sends it
	// (no path, no default port), "scheme://*.example.org[:port]" for
	// any subdomain (not example.org itself), or "*" alone for any
	// origin. At least one.
	AllowOrigins []string `yaml:"allow_origins"`
	// AllowCredentials adds Access-Control-Allow-Credentials: true to the
	// gateway's own answers, so that a credentialed request (cookies,
	// fetch's credentials: "include") can read them. Only with listed
	// origins: browsers refuse credentials with "*", and reflecting any
	// origin instead would let every site read them.
	AllowCredentials bool `yaml:"allow_credentials"`
	// LimitPreflights counts preflights against the route's limits like
	// any request (default false: they are proxied unlimited, except on a
	// route that lists OPTIONS among its methods, which counts them). A refused
	// preflight fails in the browser as a CORS error whatever it carries:
	// a preflight needs a 2xx answer.
	LimitPreflights bool `yaml:"limit_preflights"`
}

// corsPolicy is a validated CORSSpec.
type corsPolicy struct {
	any         bool                // "*"
	exact       map[string]struct{} // lower case "scheme://host[:port]"
	wild        []originPattern
	credentials bool
	preflights  bool // LimitPreflights
}

// originPattern is "scheme://*.suffix[:port]".
type originPattern struct {
	scheme string
	suffix string // ".example.org"
	port   string // "" for none
}

// compileCORS validates c; each error names its field ("cors.allow_origins[1]").
func compileCORS(c *CORSSpec) (*corsPolicy, []error) {
	var errs []error
	p := &corsPolicy{exact: map[string]struct{}{}, credentials: c.AllowCredentials, preflights: c.LimitPreflights}
	if len(c.AllowOrigins) == 0 {
		errs = append(errs, fmt.Errorf(`cors.allow_origins: no origins (list the origins of the pages that call the API, as "https://app.example.com", or "*" for any)`))
	}
	for i, o := range c.AllowOrigins {
		at := fmt.Sprintf("cors.allow_origins[%d]", i)
		if o == "*" {
			if len(c.AllowOrigins) > 1 {
				errs = append(errs, fmt.Errorf(`%s: "*" allows every origin: list it alone, or list the origins without it`, at))
			}
			if c.AllowCredentials {
				errs = append(errs, fmt.Errorf(`%s: "*" with allow_credentials: browsers refuse credentials with "*", and answering any origin by name would let every site read them; list the origins`, at))
			}
			p.any = true
			continue
		}
		scheme, host, port, wild, msg := parseOrigin(strings.ToLower(o))
		switch {
		case msg != "":
			errs = append(errs, fmt.Errorf("%s: %q %s", at, o, msg))
		case wild:
			pat := originPattern{scheme, host, port}
			if !slices.Contains(p.wild, pat) {
				p.wild = append(p.wild, pat)
			}
		default:
			p.exact[strings.ToLower(o)] = struct{}{}
		}
	}
	return p, errs
}

// parseOrigin splits an origin, lower case, as "scheme://host[:port]";
// for "scheme://*.suffix[:port]" host is ".suffix" and wild is set. msg
// says what is wrong, "" when nothing is.
func parseOrigin(o string) (scheme, host, port string, wild bool, msg string) {
	const form = `is not an origin: want scheme://host[:port] as a browser sends it in Origin (e.g. "https://app.example.com"), "scheme://*.domain" for its subdomains, or "*"`
	scheme, rest, ok := strings.Cut(o, "://")
	if !ok || scheme == "" || !validScheme(scheme) {
		return "", "", "", false, form
	}
	if i := strings.IndexAny(rest, "/?#@"); i >= 0 {
		if rest[i] == '/' && i == len(rest)-1 {
			return "", "", "", false, fmt.Sprintf("ends with /: an origin has no path; write %q", scheme+"://"+rest[:i])
		}
		return "", "", "", false, "has a path, query, fragment or user: " + form
	}
	host = rest
	if strings.HasPrefix(rest, "[") { // an IPv6 literal
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return "", "", "", false, form
		}
		host = rest[:end+1]
		if after := rest[end+1:]; after != "" {
			if after[0] != ':' {
				return "", "", "", false, form
			}
			port = after[1:]
		}
	} else if h, pt, ok := strings.Cut(rest, ":"); ok {
		host, port = h, pt
	}
	if port != "" || strings.HasSuffix(rest, ":") {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return "", "", "", false, "has a port that is not 1 to 65535: " + form
		}
		if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
			return "", "", "", false, fmt.Sprintf("names the default port, which browsers leave out of Origin: write %q", strings.TrimSuffix(o, ":"+port))
		}
	}
	if strings.HasPrefix(host, "*.") {
		wild, host = true, host[1:]
	}
	if strings.HasPrefix(host, "[") && !wild {
		return scheme, host, port, false, ""
	}
	if !hostName(strings.TrimPrefix(host, ".")) {
		return "", "", "", false, `has no host name ("*" only as "*." before a domain): ` + form
	}
	return scheme, host, port, wild, ""
}

func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// hostName reports whether h, lower case, is a dotted name of letters,
// digits and hyphens (a browser sends an internationalised one in
// punycode).
func hostName(h string) bool {
	if h == "" {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || strings.IndexFunc(label, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-')
		}) >= 0 {
			return false
		}
	}
	return true
}

// allows reports whether origin, a request's Origin, is allowed, and the
// Access-Control-Allow-Origin the gateway answers it with.
func (p *corsPolicy) allows(origin string) (allowOrigin string, ok bool) {
	if origin == "" {
		return "", false
	}
	lower := strings.ToLower(origin)
	if _, ok := p.exact[lower]; ok {
		return origin, true
	}
	if len(p.wild) > 0 {
		if scheme, host, port, wild, msg := parseOrigin(lower); msg == "" && !wild {
			for _, w := range p.wild {
				if w.scheme == scheme && w.port == port && len(host) > len(w.suffix) && strings.HasSuffix(host, w.suffix) {
					return origin, true
				}
			}
		}
	}
	if p.any {
		return "*", true
	}
	return "", false
}

// originOf is the request's Origin, "" when it has none or several.
func originOf(r *http.Request) string {
	if vs := r.Header["Origin"]; len(vs) == 1 {
		return vs[0]
	}
	return ""
}

// preflight reports whether r is a CORS preflight (Fetch standard §3.2.2).
func preflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && originOf(r) != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// corsAnswer is what the gateway's CORS fields are for one request.
type corsAnswer struct {
	allowOrigin string // "" when the origin is not allowed
	credentials bool
}

// corsFor returns the CORS answer for r under the policies that apply to
// it (its route's section's, or every section's for a request that
// matches no route), nil when none does. An origin listed by name wins
// over "*".
func corsFor(r *http.Request, ps []*corsPolicy) *corsAnswer {
	if len(ps) == 0 {
		return nil
	}
	a := &corsAnswer{}
	origin := originOf(r)
	for _, p := range ps {
		if ao, ok := p.allows(origin); ok && (a.allowOrigin == "" || a.allowOrigin == "*") {
			a.allowOrigin, a.credentials = ao, p.credentials && ao != "*"
		}
	}
	return a
}

// exposed are the fields the gateway writes that browser code may read
// only when Access-Control-Expose-Headers lists them: the rate limit
// fields of o's Set under their names, and Retry-After.
func exposed(o headers.Options) []string { return o.FieldNames() }

// ownCORS sets the CORS fields of an answer of the gateway's own to a.
func (g *Gateway) ownCORS(h http.Header, a *corsAnswer) {
	if !slices.ContainsFunc(h.Values("Vary"), func(v string) bool { return listHas(v, "Origin") }) {
		h.Add("Vary", "Origin")
	}
	if a.allowOrigin == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", a.allowOrigin)
	if a.credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	h.Set("Access-Control-Expose-Headers", strings.Join(g.exposed, ", "))
}

// upstreamCORS appends the gateway's fields to the
// Access-Control-Expose-Headers of an upstream's answer that allows the
// origin (it carries Access-Control-Allow-Origin), those it lists already
// left out.
func (g *Gateway) upstreamCORS(h http.Header, a *corsAnswer) {
	if a == nil || a.allowOrigin == "" || len(h.Values("Access-Control-Allow-Origin")) == 0 {
		return
	}
	have := h.Values("Access-Control-Expose-Headers")
	var add []string
	for _, name := range g.exposed {
		if !slices.ContainsFunc(have, func(v string) bool { return listHas(v, name) }) {
			add = append(add, name)
		}
	}
	if len(add) == 0 {
		return
	}
	if len(have) == 0 {
		h.Set("Access-Control-Expose-Headers", strings.Join(add, ", "))
		return
	}
	// One field line, the upstream's members first: some clients read
	// only the first line of a field.
	h.Set("Access-Control-Expose-Headers", strings.Join(append(slices.Clip(have), add...), ", "))
}

// listHas reports whether the comma-separated list v has name, case-insensitively.
func listHas(v, name string) bool {
	for m := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(m), name) {
			return true
		}
	}
	return false
}
