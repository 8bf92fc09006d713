package policy

// match finds the rule for one request descriptor the way
// envoyproxy/ratelimit does: level by level, the most specific sibling
// (exact value, then the first wildcard prefix in file order, then the
// value-less key); no backtracking to a less specific sibling when a deeper
// level fails; and a rule applies only when it sits at the descriptor's
// last entry. It returns nil when no rule applies.
func (d *Domain) match(entries []Entry) *Rule {
	lv := &d.top
	var found *Rule
	for i, e := range entries {
		n := lv.find(e.Key, e.Value)
		if n == nil {
			break
		}
		if i == len(entries)-1 {
			found = n.Rule
			break
		}
		if n.sub.empty() {
			break
		}
		lv = &n.sub
	}
	return found
}

// Match returns the rule a descriptor's entries select in domain, or nil
// when none applies (no rule, an unknown domain, or a descriptor deeper or
// shallower than any configured rule). Replaces are not applied: they
// depend on the other descriptors of a request.
func (c *Config) Match(domain string, entries []Entry) *Rule {
	d := c.Domain(domain)
	if d == nil {
		return nil
	}
	return d.match(entries)
}
