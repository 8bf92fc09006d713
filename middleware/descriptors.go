package middleware

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/dimension"
	"github.com/floodgate/floodgate/policy"
)

// Limited reports whether some rule of dom could limit a descriptor made
// of entries: dom's descriptor tree has a path of their keys
// (EntrySpec.DescriptorKey), in order, ending at a rule. Values are only
// known per request, so any value counts, except the constant of a
// generic_key entry or of a Match entry (header_value_match's
// descriptor_value), which must match the tree's value
// (policy.Node.MatchValue).
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
		if constant(e) && !n.MatchValue(e.Value) {
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

// constant reports whether e's value is always its Value: a generic_key
// entry, or a Match entry, whose value when the test passes is Value.
func constant(e dimension.EntrySpec) bool {
	return e.Value != "" && (e.Source == "generic_key" || e.Match != nil)
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

// entriesText is a descriptor's keys in order, a constant one's with its
// value: [generic_key="checkout", remote_address].
func entriesText(es []dimension.EntrySpec) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.DescriptorKey()
		if constant(e) {
			parts[i] += "=" + strconv.Quote(e.Value)
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
