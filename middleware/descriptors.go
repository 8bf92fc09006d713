package middleware

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/policy"
)

// Limited reports whether some rule of dom could limit a descriptor made
// of entries: dom's descriptor tree has a path of their keys
// (EntrySpec.DescriptorKey), in order, ending at a rule. Most values are
// only known per request, so any value counts; an entry whose values are
// known beforehand — a generic_key's or a Match entry's Value
// (header_value_match's descriptor_value), a path entry's Routes, each
// with the Default it takes when its source has none — needs one of them
// to match the tree's value (policy.Node.MatchValue).
// Entries that may be left out (SkipIfAbsent) make the paths without them
// count too. False for no entries or a nil dom.
//
// New checks every descriptor of its Extractor with it; the gateway warns
// of each route descriptor it finds false for.
func Limited(dom *policy.Domain, entries []dimension.EntrySpec) bool {
	if dom == nil {
		return false
	}
	return limited(dom.Descriptors, entries)
}

func limited(nodes []*policy.Node, es []dimension.EntrySpec) bool {
	if len(es) == 0 {
		return false
	}
	e := es[0]
	for _, n := range nodes {
		if n.Key != e.DescriptorKey() {
			continue
		}
		if vs, known := values(e); known && !slices.ContainsFunc(vs, n.MatchValue) {
			continue
		}
		if len(es) == 1 && n.Rule != nil {
			return true
		}
		if len(es) > 1 && (limited(n.Children, es[1:]) || n.Rule != nil && skippable(es[1:])) {
			return true
		}
	}
	if e.SkipIfAbsent && len(es) > 1 {
		return limited(nodes, es[1:])
	}
	return false
}

// values returns the values e can take when they are known before any
// request (known true): a generic_key's Value; a Match entry's Value,
// which it takes when its test passes; a path entry's Routes, one of
// which it takes for a path under them; and, for a Match or path entry,
// its Default, taken when the test fails or the path is under no route.
func values(e dimension.EntrySpec) (vs []string, known bool) {
	switch {
	case e.Source == "generic_key" || e.Match != nil:
		vs = []string{e.Value}
	case e.Source == "path" && len(e.Routes) > 0:
		vs = slices.Clone(e.Routes)
	default:
		return nil, false
	}
	if e.Default != "" {
		vs = append(vs, e.Default)
	}
	return vs, true
}

func skippable(es []dimension.EntrySpec) bool {
	for _, e := range es {
		if !e.SkipIfAbsent {
			return false
		}
	}
	return true
}

// checkDescriptors reports the descriptors of specs that no rule of
// domain in cfg can limit (Limited is false): a middleware with them lets
// the requests they describe through unlimited, silently — almost surely a
// misspelt key ("remote_adress"), a header's name where the rules have
// another key, or entries in another order than the rules nest them. A
// domain cfg does not have is checkDomain's.
func checkDescriptors(cfg *policy.Config, domain string, specs []dimension.DescriptorSpec) error {
	dom := cfg.Domain(domain)
	if dom == nil {
		return nil
	}
	var dead []string
	for i, d := range specs {
		if !Limited(dom, d.Entries) {
			dead = append(dead, fmt.Sprintf("descriptors[%d] %s", i, entriesText(d.Entries)))
		}
	}
	if len(dead) == 0 {
		return nil
	}
	these := "this descriptor"
	if len(dead) > 1 {
		these = "these descriptors"
	}
	return fmt.Errorf("middleware: extractor %s: no rule of domain %q matches these keys in this order (%s), so %s would limit nothing; check the keys' spelling and order, or pass WithDescriptorCheck(false) for an extractor the domain limits only in part",
		strings.Join(dead, ", "), domain, topKeys(dom), these)
}

// entriesText is a descriptor's keys in order, with the values of those
// whose values are known (values): [generic_key="checkout",
// remote_address, path="/v1/search"|"/v1/"].
func entriesText(es []dimension.EntrySpec) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.DescriptorKey()
		if vs, known := values(e); known {
			q := make([]string, len(vs))
			for j, v := range vs {
				q[j] = strconv.Quote(v)
			}
			parts[i] += "=" + strings.Join(q, "|")
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// topKeys says which keys dom's rules start with, each once, with its
// value where the rules set one.
func topKeys(dom *policy.Domain) string {
	var keys []string
	seen := map[string]bool{}
	for _, n := range dom.Descriptors {
		k := n.Key
		if n.Value != "" {
			k += "=" + strconv.Quote(n.Value)
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "the domain has no descriptors"
	}
	return "its top-level keys are " + strings.Join(keys, ", ")
}
