package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"unsafe"

	"github.com/floodgate/floodgate/store"
)

// maxKeyPart bounds what one descriptor key or value adds to a store key:
// one whose percent-encoded form (appendEscaped) is longer than this many
// bytes goes in as its digest (appendDigest). A request may carry values
// of any length (a path with its query string); the store keys stay short
// — memcached takes at most 250 bytes — and distinct values keep distinct
// keys. Rules match the full value.
const maxKeyPart = 200

// maxKeyPath bounds the entries' part of a store key and a per-descriptor
// limit's name: an Envoy per-descriptor limit keys by every entry of the
// descriptor, and a request may send any number; past this many bytes they
// go in as one digest.
const maxKeyPath = 512

// appendKeyPart appends s, a descriptor key or value, to a store key:
// percent-encoded, or as its digest when that would be longer than
// maxKeyPart bytes. A digest never reads as an encoded string ("%H" is not
// an escape), so the two forms never collide.
func appendKeyPart(b []byte, s string) []byte {
	if len(s) <= maxKeyPart { // else its encoding is longer still
		start := len(b)
		if b = appendEscaped(b, s); len(b)-start <= maxKeyPart {
			return b
		}
		b = b[:start]
	}
	return appendDigest(b, s)
}

// appendDigest appends "%H" and the unpadded base64url SHA-256 of s: 45
// bytes, none of them a separator of the key syntax.
func appendDigest(b []byte, s string) []byte {
	sum := sha256.Sum256([]byte(s))
	b = append(b, "%H"...)
	return base64.RawURLEncoding.AppendEncode(b, sum[:])
}

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
				k = strings.Clone(k) // it may alias the plan's buffer (appendKey)
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys, nil
}

// detachKeys copies the store keys a response keeps — its concurrency
// leases, for Release, and the wait strategy's key — out of the plan's key
// buffer, which the next decision reuses (see Engine.appendKey).
func (r *Response) detachKeys() {
	for i := range r.leases {
		r.leases[i].Key = strings.Clone(r.leases[i].Key)
	}
	r.waitKey = strings.Clone(r.waitKey)
}

// keepCharged records on r the store requests its decision charged (see
// Engine.Refund), copied out of the plan's scratch and, when the keys alias
// the plan's key buffer (Engine.aliasKeys), with their keys copied: into
// b's room when b is not nil and they fit, else each on its own.
func (r *Response) keepCharged(charged []store.Request, b *statusBlock, alias bool) {
	var reqs []store.Request
	var keys []byte
	if b != nil {
		reqs, keys = b.charged[:0], b.keys[:0]
	}
	if cap(reqs) < len(charged) {
		reqs = make([]store.Request, 0, len(charged))
	}
	for _, q := range charged {
		switch {
		case !alias:
		case len(q.Key) <= cap(keys)-len(keys):
			start := len(keys)
			keys = append(keys, q.Key...) // within b.keys: never moved
			q.Key = unsafe.String(&keys[start], len(q.Key))
		default:
			q.Key = strings.Clone(q.Key)
		}
		reqs = append(reqs, q)
	}
	r.charged = reqs
}

// statusBlock holds a one-descriptor response's status, the limit
// statuses of its usual plan (one key, and room for a lend pool's status)
// and what it charged (keepCharged) in one allocation instead of several.
type statusBlock struct {
	status  [1]Status
	limits  [2]LimitStatus
	charged [2]store.Request
	keys    [256]byte // the charged keys' bytes on the memory store
}

// newStatuses returns n statuses for a response. For one descriptor they
// come with room for the plan's limit statuses (see limitStatuses) and
// what it charges, in buf when it is not nil (DecideInto), and the block
// is returned; else the block is nil.
func newStatuses(p *plan, n int, buf *statusBlock) ([]Status, *statusBlock) {
	if n != 1 || p == nil {
		return make([]Status, n), nil
	}
	b := buf
	if b == nil {
		b = new(statusBlock)
	} else {
		// b.keys is only read up to what keepCharged writes.
		b.status, b.limits, b.charged = [1]Status{}, [2]LimitStatus{}, [2]store.Request{}
	}
	p.limits = b.limits[:0]
	return b.status[:], b
}

// limitStatuses returns an empty slice with room for n limit statuses: the
// room newStatuses made if it is enough, else a new array.
func (p *plan) limitStatuses(n int) []LimitStatus {
	if cap(p.limits) >= n {
		return p.limits[:0:n]
	}
	return make([]LimitStatus, 0, n)
}
