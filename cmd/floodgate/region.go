package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
	"github.com/floodgate/floodgate/store/lease"
	"github.com/floodgate/floodgate/store/region"
	"github.com/floodgate/floodgate/store/storeurl"
)

// regionFlags are serve's flags for several regions (store/region).
type regionFlags struct {
	region, peers, weights string
	slice                  int64
	timeout, sliceTTL      time.Duration
	prefetch               bool
}

func (r *regionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.region, "region", "", "several regions: this instance's region, by the name every region gives it (case-sensitive); each limit is divided among the regions by --region-weights, decided on this region's share in --store, and borrowed from --region-peers when the share refuses (default: one region, off)")
	fs.StringVar(&r.peers, "region-peers", "", `with --region: the other regions and their stores, NAME=URL separated by spaces or commas ("eu=redis://eu-redis:6379 ap=redis-cluster://h1:6379,h2:6379"); a peer that cannot be reached is left out and retried, and this region limits on its share meanwhile`)
	fs.StringVar(&r.weights, "region-weights", "", "with --region: each region's weight, NAME=N separated by commas (default 1 each); give every region the same list, or the shares need not add up to the limit")
	fs.Int64Var(&r.slice, "region-slice", 0, "with --region: borrow this many units from a peer at a time and admit from them in process (0: each request's own cost, exact; N >= 2: one cross-region call per N units, and a window may admit up to instances × (regions − 1) × N beyond the limit)")
	fs.DurationVar(&r.sliceTTL, "region-slice-ttl", lease.DefaultTTL, "with --region-slice: how long a borrowed slice is used before its unused units go back to the lender; set it above the usual gap between a key's borrowed requests (a slice that expires unused costs a second cross-region call)")
	fs.BoolVar(&r.prefetch, "region-prefetch", false, "with --region-slice: borrow ahead, in the background: when a decision leaves this region's share of a key fewer units than a slice, a slice is borrowed from a peer then, so that the requests the share refuses next are admitted in process without waiting on another region")
	fs.DurationVar(&r.timeout, "region-timeout", region.DefaultTimeout, "with --region: how long one decision may spend borrowing from the peers, all of them together; a peer that fails or is late is left out for "+region.DefaultBackoff.String()+", or until a probe (every second) finds it back (--store-timeout's deadline grows by as much: a decision may wait for this region's store, then for the peers)")
}

// regionPeer is one NAME=URL of --region-peers.
type regionPeer struct{ name, url string }

var regionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// nextPeer finds, in a --region-peers item, a comma that starts another
// NAME=SCHEME:// (peers separated by commas, as the weights are), which no
// store URL holds: a cluster's or a ring's hosts follow commas without
// '=' and "://".
var nextPeer = regexp.MustCompile(`,[A-Za-z0-9][A-Za-z0-9_.-]*=[A-Za-z][A-Za-z0-9+.-]*://`)

// remoteSchemes names the store URLs a region's store may have: those
// the other regions reach.
const remoteSchemes = "redis://, rediss://, redis-cluster://, redis-sentinel://, memcached:// or memcacheds://"

// parsePeers reads --region-peers: NAME=URL items separated by spaces (or
// by commas). A peer's URL is never shown whole in an error: it may hold
// a password.
func parsePeers(v string) ([]regionPeer, error) {
	var items []string
	for _, field := range strings.Fields(v) {
		for {
			loc := nextPeer.FindStringIndex(field)
			if loc == nil {
				break
			}
			if loc[0] > 0 { // a field may start with the comma
				items = append(items, field[:loc[0]])
			}
			field = field[loc[0]+1:]
		}
		items = append(items, field)
	}
	var out []regionPeer
	for _, item := range items {
		name, url, ok := strings.Cut(item, "=")
		switch {
		case !ok || url == "" || name == "":
			return nil, fmt.Errorf("%q: want NAME=URL (a region's name and its store's URL), the peers separated by spaces or commas", store.RedactURL(item))
		case !regionName.MatchString(name):
			return nil, fmt.Errorf("region name %q: want letters, digits, '_', '-' or '.'", name)
		case !strings.Contains(url, "://"):
			return nil, fmt.Errorf("region %q: its URL has no \"://\": want %s", name, remoteSchemes)
		case !knownScheme(url):
			scheme, _, _ := strings.Cut(url, "://")
			return nil, fmt.Errorf("region %q: unknown scheme %q: want %s", name, scheme, remoteSchemes)
		case memoryStore(url):
			return nil, fmt.Errorf("region %q: memory:// is in a process of its own; a peer region's store must be one the regions share: %s", name, remoteSchemes)
		}
		out = append(out, regionPeer{name, url})
	}
	return out, nil
}

// knownScheme reports whether url names a store storeurl opens.
func knownScheme(url string) bool {
	scheme, _, ok := strings.Cut(url, "://")
	return ok && slices.Contains(storeurl.Schemes(), strings.ToLower(scheme))
}

// servers returns the servers a store URL names, each as host:port and
// database, lower case: two URLs that share one are the same store (or
// part of it).
func servers(url string) []string {
	_, rest, _ := strings.Cut(url, "://")
	rest, _, _ = strings.Cut(rest, "?")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	hosts, path, _ := strings.Cut(rest, "/")
	path = strings.Trim(path, "/")
	if path == "0" {
		path = "" // Redis's default database
	}
	var out []string
	for h := range strings.SplitSeq(hosts, ",") {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			if !strings.Contains(h, ":") || strings.HasSuffix(h, "]") {
				h += ":" // the scheme's default port: the same for the same scheme
			}
			out = append(out, h+"/"+path)
		}
	}
	return out
}

// sameServer returns a server both URLs name, if any.
func sameServer(a, b string) string {
	bs := servers(b)
	for _, x := range servers(a) {
		if slices.Contains(bs, x) {
			return strings.TrimSuffix(strings.TrimSuffix(x, "/"), ":")
		}
	}
	return ""
}

// parseWeights reads --region-weights: NAME=N items separated by commas
// (or spaces).
func parseWeights(v string) (map[string]int, error) {
	out := map[string]int{}
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		name, n, ok := strings.Cut(item, "=")
		w, err := strconv.Atoi(n)
		if !ok || err != nil || w < 1 || w > region.MaxWeight {
			return nil, fmt.Errorf("%q: want NAME=N with N from 1 to %d, separated by commas", item, region.MaxWeight)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("region %q is weighed twice", name)
		}
		out[name] = w
	}
	return out, nil
}

// redactPeers hides the passwords of --region-peers' URLs.
func redactPeers(v string) string {
	items := strings.Fields(v)
	for i, item := range items {
		if name, url, ok := strings.Cut(item, "="); ok {
			items[i] = name + "=" + store.RedactURL(url)
		} else {
			items[i] = store.RedactURL(item)
		}
	}
	return strings.Join(items, " ")
}

// checkRegion returns what is wrong with the region flags.
func (f *serveFlags) checkRegion() []error {
	var errs []error
	r := f.regions
	if r.region == "" {
		for _, name := range []string{"region-peers", "region-weights", "region-slice", "region-slice-ttl", "region-prefetch", "region-timeout"} {
			if f.given[name] {
				errs = append(errs, fmt.Errorf("%s: only with %s (this instance's region)", f.flag(name), f.flag("region")))
			}
		}
		return errs
	}
	if !regionName.MatchString(r.region) {
		errs = append(errs, fmt.Errorf("%s: want letters, digits, '_', '-' or '.' (case-sensitive)", f.origin("region", r.region)))
	}
	if memoryStore(f.store) {
		errs = append(errs, fmt.Errorf("%s: %s is in this process; a region's store must be one its peers reach: %s",
			f.origin("region", r.region), f.origin("store", storeurl.Redact(f.store)), remoteSchemes))
	}
	peers, err := parsePeers(r.peers)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("%s: %w", f.origin("region-peers", redactPeers(r.peers)), err))
	case len(peers) == 0:
		errs = append(errs, fmt.Errorf("%s: needs %s: the other regions, NAME=URL each", f.origin("region", r.region), f.flag("region-peers")))
	}
	names := map[string]bool{r.region: true}
	for i, p := range peers {
		if names[p.name] {
			errs = append(errs, fmt.Errorf("%s: region %q is named twice (this region is %q)", f.flag("region-peers"), p.name, r.region))
		}
		names[p.name] = true
		// A peer on this region's own store would lend this region's
		// budget back to it: the limit, halved in effect, with no error.
		if srv := sameServer(p.url, f.store); srv != "" && !memoryStore(f.store) {
			errs = append(errs, fmt.Errorf("%s: region %q: its store is this region's own %s (both name %s); each region needs a store of its own",
				f.flag("region-peers"), p.name, f.flag("store"), srv))
		}
		for _, q := range peers[:i] {
			if srv := sameServer(p.url, q.url); srv != "" {
				errs = append(errs, fmt.Errorf("%s: regions %q and %q have one store (both name %s); each region needs a store of its own",
					f.flag("region-peers"), q.name, p.name, srv))
			}
		}
	}
	weights, err := parseWeights(r.weights)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", f.origin("region-weights", r.weights), err))
	}
	for name := range weights {
		if !names[name] && err == nil && len(peers) > 0 {
			errs = append(errs, fmt.Errorf("%s: region %q is neither %s nor one of %s", f.origin("region-weights", r.weights), name, f.origin("region", r.region), f.flag("region-peers")))
		}
	}
	if r.slice < 0 || r.slice == 1 {
		errs = append(errs, fmt.Errorf("%s: must be 0 (exact) or at least 2", f.origin("region-slice", r.slice)))
	}
	if r.sliceTTL <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be > 0", f.origin("region-slice-ttl", r.sliceTTL)))
	}
	if f.given["region-slice-ttl"] && r.slice == 0 {
		errs = append(errs, fmt.Errorf("%s: only with %s N (borrowing slices)", f.flag("region-slice-ttl"), f.flag("region-slice")))
	}
	if r.prefetch && r.slice == 0 {
		errs = append(errs, fmt.Errorf("%s: only with %s N (it borrows slices ahead)", f.flag("region-prefetch"), f.flag("region-slice")))
	}
	if r.timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be > 0", f.origin("region-timeout", r.timeout)))
	}
	return errs
}

// openRegion returns this region's store over local, its own store, with
// the peers of --region-peers; it closes local when it fails. A peer that
// cannot be reached yet is opened in the background (a region that loses
// its peers limits on its share).
func openRegion(f serveFlags, local store.Store, log *slog.Logger) (store.Store, error) {
	r := f.regions
	peers, err := parsePeers(r.peers)
	if err != nil { // checked by checkRegion
		_ = local.Close()
		return nil, err
	}
	weights, err := parseWeights(r.weights)
	if err != nil {
		_ = local.Close()
		return nil, err
	}
	var ps []region.Peer
	fail := func(err error) (store.Store, error) {
		_ = local.Close()
		for _, p := range ps {
			_ = p.Store.Close()
		}
		return nil, err
	}
	for _, p := range peers {
		st, err := storeurl.OpenRetrying(p.url, storeurl.WithTimeout(max(time.Second, 4*f.storeTimeout)),
			storeurl.WithLogger(log.With("region", p.name)),
			storeurl.WithMeanwhile("this region limits on its share without this peer meanwhile"))
		if err != nil {
			if ue, ok := errors.AsType[*storeurl.URLError](err); ok {
				return fail(fmt.Errorf("%s: region %q: %s: %s", f.flag("region-peers"), p.name, store.RedactURL(ue.URL), ue.Reason))
			}
			return fail(fmt.Errorf("%s: region %q: %w", f.flag("region-peers"), p.name, err))
		}
		ps = append(ps, region.Peer{Name: p.name, Store: st})
	}
	// Two URLs checkRegion could not tell apart (another host name, an
	// address behind a load balancer) may still reach one store: asked.
	stores := append([]region.Peer{{Name: r.region, Store: local}}, ps...)
	for i, p := range stores[1:] {
		for _, q := range stores[:i+1] {
			if sameStore(p.Store, q.Store) {
				what := fmt.Sprintf("this region's own %s", f.flag("store"))
				if q.Store != local {
					what = fmt.Sprintf("region %q's", q.Name)
				}
				return fail(fmt.Errorf("%s: region %q: its store is %s under another name (a key charged in one shows in the other); each region needs a store of its own",
					f.flag("region-peers"), p.Name, what))
			}
		}
	}
	rs, err := region.New(r.region, local, ps, region.WithWeights(weights), region.WithSlice(r.slice), region.WithSliceTTL(r.sliceTTL), prefetch(r.prefetch),
		region.WithTimeout(r.timeout), region.WithLogger(log))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.origin("region", r.region), err)
	}
	for _, p := range ps {
		// A peer being opened in the background reads down until it
		// answers, not up until a borrowing fails.
		if _, _, whole := store.Under[noStore](p.Store); !whole {
			rs.Unreached(p.Name)
		}
	}
	all, ws, fp := rs.Regions()
	weighed := make([]string, len(all))
	for i, n := range all {
		weighed[i] = fmt.Sprintf("%s=%d", n, ws[i])
	}
	log.Info("regions: each limit is divided among them by weight; this region decides on its share and borrows from the peers when it refuses; every region must log the same weights and fingerprint",
		"region", r.region, "weights", strings.Join(weighed, ","), "fingerprint", fp, "slice", r.slice, "slice_ttl", r.sliceTTL, "prefetch", r.prefetch, "timeout", r.timeout)
	return rs, nil
}

// note is what the serving line says of the regions: nothing without
// --region.
func (r regionFlags) note() string {
	if r.region == "" {
		return ""
	}
	return ", region " + r.region
}

// prefetch is region.WithPrefetch when on, else no option.
func prefetch(on bool) region.Option {
	if on {
		return region.WithPrefetch()
	}
	return nil
}

// probeLimit is sameStore's: a window short enough that the probe key is
// gone a second later, whatever the Reset does.
var probeLimit, _ = algo.Compile(algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Second})

// sameStore reports whether a and b are one store: a probe key of its own
// charged in a shows spent in b. Stores that cannot be asked now (a peer
// opened in the background) are not one as far as it knows.
func sameStore(a, b store.Store) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := "fg:__region_probe:" + rand.Text()
	req := []store.Request{{Key: key, Limit: probeLimit, Cost: 1}}
	out := make([]algo.Decision, 1)
	res, err := a.Take(ctx, req, out)
	if err != nil || res.Fallback || !out[0].Allowed {
		return false
	}
	defer func() {
		if ri, ok := a.(store.RequestInspector); ok {
			_ = ri.ResetRequests(ctx, req)
		} else {
			_ = a.Reset(ctx, key)
		}
	}()
	// Peek says what a Take of the cost would do: refuse it where the
	// probe spent the window's one unit.
	if err := b.Peek(ctx, req, out); err != nil {
		return false
	}
	return !out[0].Allowed
}

// maxSliceWarnings bounds regionSliceWarnings' list: the rest is counted.
const maxSliceWarnings = 5

// regionSliceWarnings returns a warning for each rule of cfg that gives a
// peer region a share smaller than --region-slice: borrowing a slice then
// takes that region's whole share, which its own requests are refused
// until the slice's units are used or go back (--region-slice-ttl), and
// takes two calls. Nothing without slices or without regions.
func regionSliceWarnings(st store.Store, cfg *policy.Config, f serveFlags) []string {
	rs, ok, _ := store.Under[*region.Store](st)
	if !ok || f.regions.slice < 2 {
		return nil
	}
	var out []string
	more := 0
	for _, r := range cfg.Rules() {
		l := r.Limit()
		if l == nil {
			continue
		}
		shares, borrowed := rs.PeerShares(l)
		if !borrowed {
			continue
		}
		name, least := "", int64(-1)
		for n, sh := range shares {
			c := int64(0)
			if sh != nil {
				c = sh.Capacity()
			}
			if least < 0 || c < least || c == least && n < name {
				name, least = n, c
			}
		}
		if least < 0 || least >= f.regions.slice {
			continue
		}
		if len(out) == maxSliceWarnings {
			more++
			continue
		}
		out = append(out, fmt.Sprintf("%s: rule %s/%s (%s), %s, gives region %q a share of %d, less than a slice: "+
			"a slice borrowed from it takes its whole share, and it refuses its own requests until the slice's units are used or go back (%s); "+
			"set %[1]s below the peers' shares, or 0 for exact borrowing",
			f.origin("region-slice", f.regions.slice), r.Domain, r.Name, r.Pos, l, name, least, f.flag("region-slice-ttl")))
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("%s: %d more rules give a peer region a share less than a slice", f.origin("region-slice", f.regions.slice), more))
	}
	return out
}
