package memcached

import (
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
)

// Memcached keys are at most 250 bytes of printable ASCII without spaces;
// Floodgate keys are any string (descriptors hold spaces, UTF-8, long
// paths). A key is therefore encoded, injectively:
//
//   - printable ASCII other than '%' passes through unchanged, so keys read
//     the same in memcached's own tools;
//   - any other byte becomes %XX (upper-case hex);
//   - when the result is longer than maxEncodedKey, the whole key is
//     replaced by "%H" and the base64url SHA-256 of the original key.
//
// The memcached key is prefix + encoded key + "%%" + a tag naming what is
// stored ("s" for compare-and-swap state, "f:<start>" for a fixed-window
// counter, "w:<sub-window µs>:<index>" for a sliding-window counter). An
// encoded key never contains "%%" (every '%' in it is followed by a hex
// digit or 'H'), so the servers are chosen by what precedes the last "%%":
// all the entries of one Floodgate key live on one server, which keeps a
// sliding window's GetMulti to one round trip.

const (
	// maxPrefix bounds WithKeyPrefix so that every key fits in 250 bytes.
	maxPrefix = 40
	// maxEncodedKey leaves room for the prefix and the longest tag
	// ("%%w:" + two 19-digit numbers).
	maxEncodedKey = 160
	// tagSep separates the hashed part of a memcached key from its tag.
	tagSep = "%%"
)

const hexDigits = "0123456789ABCDEF"

// encodeKey appends the memcached-safe form of key to b.
func encodeKey(b []byte, key string) []byte {
	start := len(b)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c > ' ' && c < 0x7f && c != '%' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	if len(b)-start <= maxEncodedKey {
		return b
	}
	sum := sha256.Sum256([]byte(key))
	b = append(b[:start], "%H"...)
	return base64.RawURLEncoding.AppendEncode(b, sum[:])
}

// keyer builds the memcached keys of one Floodgate key.
type keyer struct {
	prefix string
}

// base returns prefix + encoded key + "%%", to which a tag is appended.
func (k keyer) base(key string) []byte {
	b := make([]byte, 0, len(k.prefix)+len(key)+len(tagSep)+48)
	b = append(b, k.prefix...)
	b = encodeKey(b, key)
	return append(b, tagSep...)
}

// state is the key of a compare-and-swap algorithm's encoded State.
func (k keyer) state(key string) string {
	return string(append(k.base(key), 's'))
}

// fixed is the key of the fixed-window counter of the window starting at
// start (µs).
func (k keyer) fixed(key string, start int64) string {
	b := append(k.base(key), 'f', ':')
	return string(strconv.AppendInt(b, start, 10))
}

// sliding returns the keys of the sliding-window counters of sub-windows
// idx, idx-1, …, idx-n (sub-windows of sub µs), newest first.
func (k keyer) sliding(key string, sub, idx int64, n int) []string {
	base := k.base(key)
	base = append(base, 'w', ':')
	base = strconv.AppendInt(base, sub, 10)
	base = append(base, ':')
	keys := make([]string, n+1)
	buf := make([]byte, 0, len(base)+20)
	for j := range keys {
		b := append(buf[:0], base...)
		keys[j] = string(strconv.AppendInt(b, idx-int64(j), 10))
	}
	return keys
}

// hashPart is the part of a memcached key that chooses its server: all but
// the tag.
func hashPart(mkey string) string {
	if i := strings.LastIndex(mkey, tagSep); i >= 0 {
		return mkey[:i]
	}
	return mkey
}
