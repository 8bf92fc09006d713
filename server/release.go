package server

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/http"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store"
)

// A lease token is what /v1/decide hands out for the concurrency slots an
// admitted request holds, and what POST /v1/release takes back. It carries
// everything a release needs (policy.Lease: store key, cost, lease id, the
// limit's slots and lease TTL), so any instance sharing the store can
// release it and no instance remembers tokens. It is URL-safe base64
// without padding of:
//
//	version   1 byte, leaseTokenVersion
//	count     uvarint, 1 to maxLeaseSlots
//	count ×   key length (uvarint) and key bytes,
//	          cost (uvarint), lease id (8 bytes, big-endian),
//	          limit (uvarint), lease TTL in µs (uvarint)
//	checksum  CRC-32 (IEEE) of everything before it, 4 bytes big-endian
//
// The checksum catches a token cut short or altered by mistake; it is not
// a signature. What keeps a caller from releasing slots it was not given
// is the lease id, 63 bits from crypto/rand per decision, and what keeps a
// forged token from touching other state is policy.Engine.ReleaseLeases,
// which only accepts keys the engine builds for concurrency limits.
const leaseTokenVersion = 1

const (
	// maxLeaseSlots bounds the slots of one token: a request has at most
	// 64 descriptors, each with a handful of keys (hierarchy, ceil, pools).
	maxLeaseSlots = 1024
	// maxLeaseToken bounds a token's length before it is decoded.
	maxLeaseToken = 256 << 10
	// minLeaseToken is a version, a count and a checksum.
	minLeaseToken = 1 + 1 + 4
)

// leaseEncoding is strict: a token has one spelling (no stray bits in
// its last character).
var leaseEncoding = base64.RawURLEncoding.Strict()

// encodeLease returns the token of ls (one admitted decision's leases).
func encodeLease(ls []policy.Lease) string {
	b := make([]byte, 0, 64)
	b = append(b, leaseTokenVersion)
	b = binary.AppendUvarint(b, uint64(len(ls)))
	for _, l := range ls {
		b = binary.AppendUvarint(b, uint64(len(l.Key)))
		b = append(b, l.Key...)
		b = binary.AppendUvarint(b, uint64(l.Cost))
		b = binary.BigEndian.AppendUint64(b, l.ID)
		b = binary.AppendUvarint(b, uint64(l.Limit))
		b = binary.AppendUvarint(b, uint64(l.TTL/time.Microsecond))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return leaseEncoding.EncodeToString(b)
}

// decodeLease parses a token, saying what is wrong with a bad one. Whether
// its keys and limits are acceptable is the engine's to check.
func decodeLease(tok string) ([]policy.Lease, error) {
	if tok == "" {
		return nil, errors.New("empty lease token")
	}
	if len(tok) > maxLeaseToken {
		return nil, fmt.Errorf("lease token of %d bytes, over the %d-byte limit", len(tok), maxLeaseToken)
	}
	b, err := leaseEncoding.DecodeString(tok)
	if err != nil {
		return nil, fmt.Errorf("lease token is not unpadded URL-safe base64: %v", err)
	}
	if len(b) < minLeaseToken {
		return nil, fmt.Errorf("lease token of %d bytes is too short to be one", len(b))
	}
	if b[0] != leaseTokenVersion {
		return nil, fmt.Errorf("lease token version %d is not supported (this server reads version %d)", b[0], leaseTokenVersion)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, errors.New("lease token checksum mismatch: the token was altered or cut short")
	}
	r := leaseReader{b: body[1:]}
	n := r.uvarint("slot count")
	if r.err == nil && (n == 0 || n > maxLeaseSlots) {
		return nil, fmt.Errorf("lease token holds %d slots; want 1 to %d", n, maxLeaseSlots)
	}
	var ls []policy.Lease
	for i := uint64(0); i < n && r.err == nil; i++ {
		ls = append(ls, r.lease(i))
	}
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d unexpected bytes after the last slot", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("malformed lease token: %w", r.err)
	}
	return ls, nil
}

// leaseReader reads a token's fields, keeping the first error.
type leaseReader struct {
	b   []byte
	err error
}

func (r *leaseReader) lease(i uint64) policy.Lease {
	var l policy.Lease
	keyLen := r.uvarint(fmt.Sprintf("slot %d: key length", i))
	if r.err == nil && keyLen > uint64(len(r.b)) {
		r.err = fmt.Errorf("slot %d: key of %d bytes, but only %d bytes left", i, keyLen, len(r.b))
	}
	if r.err != nil {
		return l
	}
	l.Key, r.b = string(r.b[:keyLen]), r.b[keyLen:]
	l.Cost = r.int63(fmt.Sprintf("slot %d: cost", i))
	if r.err == nil && len(r.b) < 8 {
		r.err = fmt.Errorf("slot %d: lease id cut short", i)
	}
	if r.err != nil {
		return l
	}
	l.ID, r.b = binary.BigEndian.Uint64(r.b), r.b[8:]
	l.Limit = r.int63(fmt.Sprintf("slot %d: limit", i))
	ttl := r.int63(fmt.Sprintf("slot %d: lease TTL", i))
	if r.err == nil && ttl > math.MaxInt64/int64(time.Microsecond) {
		r.err = fmt.Errorf("slot %d: lease TTL of %dµs is out of range", i, ttl)
	}
	l.TTL = time.Duration(ttl) * time.Microsecond
	return l
}

func (r *leaseReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%s: not a valid varint", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// int63 reads a uvarint that must fit an int64.
func (r *leaseReader) int63(what string) int64 {
	v := r.uvarint(what)
	if r.err == nil && v > math.MaxInt64 {
		r.err = fmt.Errorf("%s %d is out of range", what, v)
	}
	return int64(v)
}

// V1Release is the body of POST /v1/release and /v1/renew: one token in
// Lease, or several in Leases (at most the batch limit), not both.
type V1Release struct {
	Lease  string   `json:"lease,omitempty"`
	Leases []string `json:"leases,omitempty"`
}

// tokens returns the request's tokens, checked for count.
func (v V1Release) tokens(max int) ([]string, error) {
	switch {
	case v.Lease != "" && v.Leases != nil:
		return nil, badInput(`give "lease" or "leases", not both`)
	case v.Lease != "":
		return []string{v.Lease}, nil
	case len(v.Leases) == 0:
		return nil, badInput(`no lease: want {"lease": "<token>"} or {"leases": ["<token>", ...]}, the tokens /v1/decide answered`)
	case len(v.Leases) > max:
		return nil, badInput("%d leases, over the limit of %d", len(v.Leases), max)
	}
	return v.Leases, nil
}

// leaseOp is what POST /v1/release or /v1/renew does with the slots of
// its tokens, and how it words a store failure.
type leaseOp struct {
	name    string // "release" or "renew"
	apply   func(*policy.Engine, context.Context, []policy.Lease) error
	failure string
}

var (
	// releaseOp gives the slots back. A store failure is a 503 saying that
	// the slots come back at their lease TTL: a 204 would tell the caller
	// they are free when they are still held.
	releaseOp = leaseOp{"release", (*policy.Engine).ReleaseLeases,
		"release failed: the store could not release the slots; they come back when their lease TTL passes"}
	// renewOp extends the slots' leases by their TTL from now, for work that
	// outlives the TTL. An expired or released lease is not revived (204
	// all the same: renewing is idempotent, and the caller learns of the
	// loss from the next decision, not from here).
	renewOp = leaseOp{"renew", (*policy.Engine).RenewLeases,
		"renew failed: the store could not renew the slots; they expire at their lease TTL unless a later renewal succeeds"}
)

// handleLeases serves POST /v1/release (op releaseOp) and POST /v1/renew
// (renewOp) on the lease tokens /v1/decide answered, on any instance
// sharing the store, and answers 204. Releasing a token twice, or after
// its slots expired, is not an error, nor is renewing one that expired. A
// bad token is a 400 naming it and what is wrong, and then nothing is done.
func (s *Server) handleLeases(op leaseOp) http.HandlerFunc {
	transport := "v1-" + op.name
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := codeError
		defer func() { s.metrics.Request(transport, code, time.Since(start)) }()
		body, err := s.readBody(w, r)
		if err != nil {
			code = writeErr(w, err)
			return
		}
		var in V1Release
		if err := decodeStrict(body, &in); err != nil {
			code = writeErr(w, err)
			return
		}
		toks, err := in.tokens(s.limits.Batch)
		if err != nil {
			code = writeErr(w, err)
			return
		}
		all, owner, err := decodeLeases(in, toks)
		if err != nil {
			code = writeErr(w, err)
			return
		}
		if err := op.apply(s.engine, r.Context(), all); err != nil {
			var le *policy.LeaseError
			switch {
			case errors.As(err, &le) && le.Index < len(owner):
				o := owner[le.Index]
				err = badInput("%s: slot %d: %v", tokenName(in, o.token), o.slot, le.Err)
			case !errors.Is(err, ErrBadInput) && !errors.Is(err, policy.ErrBadRequest):
				err = &httpError{http.StatusServiceUnavailable, op.failure + " (" + store.Failure(err) + ")"}
			}
			code = writeErr(w, err)
			return
		}
		code = "OK"
		w.WriteHeader(http.StatusNoContent)
	}
}

// slotOwner locates a released slot: its token and its index there.
type slotOwner struct{ token, slot int }

// decodeLeases decodes every token of a release; owner[i] says where the
// i-th lease came from, so that the engine's complaint about it names
// the token.
func decodeLeases(in V1Release, toks []string) ([]policy.Lease, []slotOwner, error) {
	var all []policy.Lease
	var owner []slotOwner
	for i, tok := range toks {
		ls, err := decodeLease(tok)
		if err != nil {
			return nil, nil, badInput("%s: %v", tokenName(in, i), err)
		}
		for j := range ls {
			owner = append(owner, slotOwner{i, j})
		}
		all = append(all, ls...)
	}
	return all, owner, nil
}

// tokenName names the i-th token of a release as the request did.
func tokenName(in V1Release, i int) string {
	if in.Lease != "" {
		return "lease"
	}
	return fmt.Sprintf("leases[%d]", i)
}
