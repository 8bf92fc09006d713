package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/policy"
)

// SectionName is the domain-level field of a rules file that declares the
// gateway's routes. The package registers it with policy.RegisterSection,
// so any program that imports it (the floodgate binary does) loads and
// validates it, problems reported as file:line.
const SectionName = "gateway"

func init() { policy.RegisterSection(SectionName, compileSection) }

// Section is the gateway: section of one domain: how requests are matched
// to routes and mapped to descriptors that this domain's rules decide.
//
//	domain: edge
//	gateway:
//	  trusted_proxies: [10.0.0.0/8]
//	  routes:
//	    - name: search
//	      host: api.example.com
//	      path_prefix: /search
//	      methods: [GET]
//	      descriptors:
//	        - entries: [{source: remote_address}]
//	descriptors:
//	  - key: remote_address
//	    rate_limit: {unit: second, requests_per_unit: 10, algorithm: shaper, burst: 20, delay: 5}
//
// The client-identification fields (trusted proxies and the rest) are
// dimension.Spec's and apply to every route of the section.
type Section struct {
	// TrustedProxies, ProxyHeader, IPv4Prefix, IPv6Prefix, APIKey,
	// UserHeader and TenantHeader are dimension.Spec's fields of the same
	// names, shared by the routes.
	TrustedProxies []string             `yaml:"trusted_proxies"`
	ProxyHeader    string               `yaml:"proxy_header"`
	IPv4Prefix     int                  `yaml:"ipv4_prefix"`
	IPv6Prefix     int                  `yaml:"ipv6_prefix"`
	APIKey         dimension.APIKeySpec `yaml:"api_key"`
	UserHeader     string               `yaml:"user_header"`
	TenantHeader   string               `yaml:"tenant_header"`
	// RefuseStatus is the status of the routes' refusals, by a rate or a
	// concurrency limit: 429 (the default), the client over its quota, or
	// 503 (nginx's limit_req_status and limit_conn_status default), the
	// server shedding load (middleware.WithRefuseStatus). The fields,
	// Retry-After and the violated policies are the same either way; the
	// problem body's type is the draft's for the status: quota-exceeded
	// for 429, temporary-reduced-capacity for 503.
	RefuseStatus int `yaml:"refuse_status"`
	// CORS, when set, makes the routes fit an API that browser code calls
	// from other origins: preflights pass unlimited, and the gateway's own
	// answers carry the CORS fields (see CORSSpec). Nil: no CORS handling.
	CORS *CORSSpec `yaml:"cors"`
	// Routes are the request classes the domain limits. At least one.
	Routes []RouteSpec `yaml:"routes"`

	compiled []*routeSpec
	proxies  dimension.Proxies // the section's trusted proxies and header
	cors     *corsPolicy       // nil without a cors block
}

// RouteSpec is one route: which requests it matches and the descriptors
// they produce.
type RouteSpec struct {
	// Name identifies the route in logs (default: its path prefix).
	Name string `yaml:"name"`
	// Host matches the request's host, port excluded, case-insensitively:
	// "api.example.com" exactly, "*.example.com" any subdomain; a final
	// "." (a fully qualified name) is ignored, here as in the request's
	// Host. An IPv6 literal ("::1" or "[::1]") matches the address however
	// either side spells it, a zone ignored. Empty: any host.
	Host string `yaml:"host"`
	// PathPrefix matches the request path, percent-decoded and cleaned
	// (dot segments resolved, repeated slashes merged), the way route
	// prefixes do in package dimension: "/api" covers "/api" and "/api/x",
	// not "/apix"; "/api/" covers everything below it. Case-sensitive
	// unless PathCaseInsensitive; ";" parameters are part of a segment
	// ("/api;v=1/x" is not under "/api"). Default "/": every path.
	PathPrefix string `yaml:"path_prefix"`
	// PathCaseInsensitive matches PathPrefix ignoring ASCII case ("/Api/x"
	// under "/api"), for an upstream whose paths are case-insensitive.
	PathCaseInsensitive bool `yaml:"path_case_insensitive"`
	// Methods lists the methods matched, in any case; empty: any. A
	// request's method matches whatever its case ("get" as GET): methods
	// are case-sensitive (RFC 9110), but an upstream may serve "get" as
	// GET, so it is limited as one. GET implies HEAD (a HEAD is a GET
	// without the body, and is limited with it), as nginx's limit_except
	// GET does.
	Methods []string `yaml:"methods"`
	// Descriptors are what a matching request is decided on (see
	// dimension.DescriptorSpec): e.g. remote_address, a header, the path.
	// A route without descriptors passes its requests unlimited.
	Descriptors []dimension.DescriptorSpec `yaml:"descriptors"`

	node *yaml.Node // where it was written, for problems at the entry's line
}

// UnmarshalYAML decodes the route and remembers where it was written, so
// that a problem found when the gateway builds it (New, Check) is reported
// at the line of the field at fault.
func (r *RouteSpec) UnmarshalYAML(n *yaml.Node) error {
	type plain RouteSpec
	if err := n.Decode((*plain)(r)); err != nil {
		return err
	}
	r.node = n
	return nil
}

// line returns the line of the field at path under the route ("descriptors[0].entries[1].source"),
// or of the deepest part of it found, or of the route; 0 when unknown.
func (r *routeSpec) line(path string) int {
	n := r.node
	if n == nil {
		return 0
	}
	line := n.Line
	for _, part := range strings.Split(path, ".") {
		name, idx, indexed := strings.Cut(strings.TrimSuffix(part, "]"), "[")
		if n.Kind != yaml.MappingNode {
			break
		}
		var val *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				line, val = n.Content[i].Line, n.Content[i+1]
			}
		}
		if val == nil {
			break
		}
		if indexed {
			k, err := strconv.Atoi(idx)
			if err != nil || val.Kind != yaml.SequenceNode || k >= len(val.Content) {
				break
			}
			val = val.Content[k]
			line = val.Line
		}
		n = val
	}
	return line
}

// routeSpec is a validated RouteSpec.
type routeSpec struct {
	name     string
	host     string // lower case; "" any; ".example.com" for "*.example.com"
	wildcard bool
	prefix   string
	foldCase bool // PathCaseInsensitive
	// refuseStatus is the section's RefuseStatus, 429 when unset.
	refuseStatus int
	methods      []string // upper case, sorted
	spec         *dimension.Spec
	proxies      dimension.Proxies // the section's
	cors         *corsPolicy       // the section's; nil: none
	node         *yaml.Node
}

// matchKey is the same for two routes exactly when they match the same
// requests: "/x" and "/x/" cover the same paths (see under).
func (r *routeSpec) matchKey() string {
	prefix := strings.TrimSuffix(r.prefix, "/")
	if r.foldCase {
		prefix = strings.ToLower(prefix)
	}
	return r.host + "|" + fmt.Sprint(r.wildcard) + "|" + prefix + "|" + fmt.Sprint(r.foldCase) + "|" + strings.Join(r.methods, ",")
}

func compileSection(decode func(any) error) (any, error) {
	s := &Section{}
	if err := decode(s); err != nil {
		return nil, err
	}
	if err := s.compile(); err != nil {
		return nil, err
	}
	return s, nil
}

// compile validates the section. Each error starts with the offending
// field's path ("routes[1].methods[0]: ..."), which the policy loader turns
// into a line; it goes on past a problem, and returns every one it finds
// joined (errors.Join), so that one load lists them all.
func (s *Section) compile() error {
	var errs []error
	if len(s.Routes) == 0 {
		errs = append(errs, errors.New("routes: no routes (declare at least one, or drop the gateway section)"))
	}
	base := dimension.Spec{TrustedProxies: s.TrustedProxies, ProxyHeader: s.ProxyHeader, IPv4Prefix: s.IPv4Prefix,
		IPv6Prefix: s.IPv6Prefix, APIKey: s.APIKey, UserHeader: s.UserHeader, TenantHeader: s.TenantHeader}
	// The shared fields are checked once, with a descriptor that needs
	// nothing of them; the routes' extractors report only their
	// descriptors' problems.
	probe := base
	probe.Descriptors = []dimension.DescriptorSpec{{Entries: []dimension.EntrySpec{{Source: "method"}}}}
	if px, err := dimension.NewExtractor(probe); err != nil {
		errs = append(errs, specErrors("", err, false)...)
	} else {
		s.proxies = px.Proxies()
	}
	refuse := cmp.Or(s.RefuseStatus, http.StatusTooManyRequests)
	if refuse != http.StatusTooManyRequests && refuse != http.StatusServiceUnavailable {
		errs = append(errs, fmt.Errorf("refuse_status: %d is not 429 or 503 (the status of a refusal by the routes' limits; default 429)", s.RefuseStatus))
	}
	if s.CORS != nil {
		var cerrs []error
		s.cors, cerrs = compileCORS(s.CORS)
		errs = append(errs, cerrs...)
	}
	seen := map[string]int{}
	for i, rs := range s.Routes {
		at := fmt.Sprintf("routes[%d]", i)
		before := len(errs)
		r := &routeSpec{name: rs.Name, prefix: cmp.Or(rs.PathPrefix, "/"), foldCase: rs.PathCaseInsensitive, refuseStatus: refuse, proxies: s.proxies, cors: s.cors, node: rs.node}
		if !strings.HasPrefix(r.prefix, "/") {
			errs = append(errs, fmt.Errorf("%s.path_prefix: %q must start with /", at, rs.PathPrefix))
		} else if msg := dimension.DeadPathPrefix(r.prefix); msg != "" {
			errs = append(errs, fmt.Errorf("%s.path_prefix: %q %s, so the route would never apply", at, rs.PathPrefix, msg))
		}
		if r.name == "" {
			r.name = r.prefix
		}
		host := strings.ToLower(strings.TrimSpace(rs.Host))
		if strings.HasPrefix(host, "*.") {
			r.wildcard, host = true, host[1:]
		}
		if ip, ok := dimension.CanonicalIP(host); ok && !r.wildcard {
			// An IPv6 literal is matched in its canonical spelling, as
			// the request's Host is: "0:0::1" is ::1.
			host = ip
		} else if strings.ContainsAny(host, ":/*@ ") || host == "." || strings.HasSuffix(host, "..") {
			errs = append(errs, fmt.Errorf("%s.host: %q is not a host name (no port, scheme or path; \"*.\" only as a prefix)", at, rs.Host))
		}
		// A fully qualified name's final "." goes, as it goes from the
		// request's Host: "api.example.com." is api.example.com.
		r.host = strings.TrimSuffix(host, ".")
		for j, m := range rs.Methods {
			u := strings.ToUpper(strings.TrimSpace(m))
			if u == "" || strings.IndexFunc(u, func(c rune) bool { return c < 'A' || c > 'Z' }) >= 0 {
				errs = append(errs, fmt.Errorf("%s.methods[%d]: %q is not an HTTP method", at, j, m))
				continue
			}
			if !slices.Contains(r.methods, u) {
				r.methods = append(r.methods, u)
			}
		}
		if slices.Contains(r.methods, http.MethodGet) && !slices.Contains(r.methods, http.MethodHead) {
			r.methods = append(r.methods, http.MethodHead)
		}
		slices.Sort(r.methods)
		// A route whose host, prefix or methods are at fault is not
		// compared with the others: what it matches is unknown.
		if len(errs) == before {
			key := r.matchKey()
			if first, dup := seen[key]; dup {
				errs = append(errs, fmt.Errorf("%s: matches the same requests as routes[%d] (host, path_prefix and methods; a trailing / of the prefix and a HEAD beside GET change nothing), so one of them would never apply", at, first))
			} else {
				seen[key] = i
			}
		}
		if len(rs.Descriptors) > 0 {
			spec := base
			spec.Descriptors = rs.Descriptors
			// User and tenant functions are options of the gateway, not
			// known here: an extractor built with placeholders checks
			// everything else.
			if _, err := dimension.NewExtractor(spec, placeholders(spec)...); err != nil {
				errs = append(errs, specErrors(at+".", err, true)...)
			}
			r.spec = &spec
		}
		s.compiled = append(s.compiled, r)
	}
	if len(errs) > 0 {
		s.compiled = nil
		return errors.Join(errs...)
	}
	return nil
}

// placeholders returns user and tenant functions for a spec whose entries
// need them and whose headers are not set, so that validation does not
// fail on what a gateway option may supply.
func placeholders(spec dimension.Spec) []dimension.Option {
	var opts []dimension.Option
	need := func(src string) bool {
		for _, d := range spec.Descriptors {
			for _, e := range d.Entries {
				if e.Source == src {
					return true
				}
			}
		}
		return false
	}
	none := func(*http.Request) string { return "" }
	if spec.UserHeader == "" && need("user") {
		opts = append(opts, dimension.WithUser(none))
	}
	if spec.TenantHeader == "" && need("tenant") {
		opts = append(opts, dimension.WithTenant(none))
	}
	return opts
}

// specErrors rewrites the dimension.SpecErrors err holds (one, or several
// joined) as errors naming their fields' paths in the section, prefix
// first; with onlyDescriptors, the problems of the shared fields, which the
// probe reported already, are left out.
func specErrors(prefix string, err error, onlyDescriptors bool) []error {
	ses := specErrs(err)
	if len(ses) == 0 {
		return []error{err}
	}
	var out []error
	for _, e := range ses {
		if !onlyDescriptors || strings.HasPrefix(e.Field, "descriptors") {
			out = append(out, fmt.Errorf("%s%s: %s", prefix, e.Field, e.Msg))
		}
	}
	return out
}

// specErrs lists the *dimension.SpecErrors of a NewExtractor error: the
// one, or each of those it joins, in order.
func specErrs(err error) []*dimension.SpecError {
	switch e := err.(type) {
	case *dimension.SpecError:
		return []*dimension.SpecError{e}
	case interface{ Unwrap() []error }:
		var out []*dimension.SpecError
		for _, e := range e.Unwrap() {
			out = append(out, specErrs(e)...)
		}
		return out
	}
	return nil
}
