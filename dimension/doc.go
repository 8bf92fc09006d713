// Package dimension maps an HTTP request to the descriptors the policy
// engine decides on: the client's IP, its API key, user and tenant, the
// route, the method, any header or query parameter, or a constant.
//
// # Model
//
// A Spec (plain data with yaml tags, part of a rules file) lists
// descriptors, each an ordered list of entries; every entry has a key and a
// source for its value, as Envoy's rate limit actions do:
//
//	descriptors:
//	  - entries:
//	      - source: remote_address        # {remote_address: 203.0.113.7}
//	  - entries:
//	      - source: api_key               # {api_key: k-123}
//	      - source: path                  # {path: /api/users}
//	        routes: [/api/users, /api/orders]
//
// NewExtractor compiles the Spec once; Extractor.Descriptors runs per
// request. A descriptor is produced only when each of its entries has a
// value (or a default, or may be skipped), so one Spec covers requests with
// and without, say, an API key.
//
// The output types Entry and Descriptor have the shape of policy.Entry and
// policy.Descriptor's Entries. The package does not import policy: policy
// imports it, since a rules file carries a Spec.
//
// # Client IP: a security surface
//
// The client is the direct peer unless that peer is a configured trusted
// proxy; only then is X-Forwarded-For (or Forwarded, or X-Real-IP: one
// header, chosen in the Spec) read, right to left, skipping trusted hops.
// A client that is not behind a trusted proxy cannot change its key with a
// header. IPv4-mapped IPv6 addresses count as IPv4; IPv6 clients collapse to
// a /64 by default, as one subscriber commonly holds a whole /64. ClientIP
// and Proxies give the same logic to other code (logs, the gateway).
//
// # Guarantees
//
// Descriptors never panics, whatever the request holds: malformed proxy
// headers and queries are ignored as documented on each source, and the
// conditions that cannot be decided (no IP address for a remote_address
// entry, a value longer than WithMaxValueLen, and with WithRejectAmbiguous
// a header or query parameter that another parser could read as another
// value) are returned as an *Error saying which entry and why. With a dst slice kept between calls it
// allocates nothing but the client IP's text. An Extractor is immutable and
// safe for concurrent use. The package reads no clock.
package dimension
