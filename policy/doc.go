// Package policy turns configuration into decisions: it loads the YAML
// rules (a superset of envoyproxy/ratelimit's format), compiles them, matches
// request descriptors against them and decides through a store.Store, all
// descriptors of a request all or nothing.
package policy
