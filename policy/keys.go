package policy

// Keys returns the store keys Decide would use for req — every limit of
// every matched descriptor, with the derived keys of borrowing and priority
// classes — without touching the store. The admin API resets and inspects
// them. An unknown domain has no keys.
func (e *Engine) Keys(req Request) ([]string, error) {
	if err := checkRequest(&req); err != nil {
		return nil, err
	}
	snap := e.snap.Load()
	dom := snap.cfg.Domain(req.Domain)
	if dom == nil {
		return nil, nil
	}
	p := getPlan(snap, dom, len(req.Descriptors))
	defer p.release()
	if err := e.plan(p, &req, make([]Status, len(req.Descriptors))); err != nil {
		return nil, err
	}
	var keys []string
	seen := map[string]bool{}
	for i := range p.items {
		for _, k := range []string{p.items[i].key, p.items[i].lendKey} {
			if k != "" && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys, nil
}
