package headers

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// sfItem is one member of a Structured Field List (RFC 9651 §3.1) as a
// strict parser reads it: a bare item and its parameters, in order.
type sfItem struct {
	value  any // int64, string (String), sfToken, []byte, bool; decimals are refused
	params []sfParam
}

type sfParam struct {
	key   string
	value any
}

type sfToken string

// param returns the value of the parameter key and whether it is there
// (the last one wins, as RFC 9651 §3.1.2 says).
func (it sfItem) param(key string) (any, bool) {
	var v any
	ok := false
	for _, p := range it.params {
		if p.key == key {
			v, ok = p.value, true
		}
	}
	return v, ok
}

// parseSFList parses s as a Structured Field List of items (inner lists
// are refused: the rate limit fields have none), strictly per RFC 9651
// §4.2: no leading or trailing garbage, Integers of at most 15 digits,
// Strings of printable ASCII with only \" and \\ escapes.
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	p.skipSP()
	var out []sfItem
	for !p.eof() {
		it, err := p.item()
		if err != nil {
			return nil, fmt.Errorf("member %d: %w", len(out), err)
		}
		out = append(out, it)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("at %d: %q where a comma should be", p.i, p.s[p.i])
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, fmt.Errorf("trailing comma")
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	it := sfItem{value: v}
	for !p.eof() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return sfItem{}, err
		}
		var pv any = true
		if !p.eof() && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bare(); err != nil {
				return sfItem{}, fmt.Errorf("parameter %s: %w", k, err)
			}
		}
		it.params = append(it.params, sfParam{k, pv})
	}
	return it, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.eof() || !(p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] == '*') {
		return "", fmt.Errorf("at %d: bad key start", p.i)
	}
	for !p.eof() {
		c := p.s[p.i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*' {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (any, error) {
	if p.eof() {
		return nil, fmt.Errorf("missing value")
	}
	switch c := p.s[p.i]; {
	case c == '-' || c >= '0' && c <= '9':
		return p.integer()
	case c == '"':
		return p.str()
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, fmt.Errorf("unterminated byte sequence")
		}
		b, err := base64.StdEncoding.DecodeString(p.s[p.i+1 : p.i+1+end])
		p.i += end + 2
		return b, err
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, fmt.Errorf("bad boolean")
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		start := p.i
		for p.i++; !p.eof() && strings.IndexByte("!#$%&'*+-.^_`|~:/", p.s[p.i]) >= 0 ||
			!p.eof() && (p.s[p.i] >= 'a' && p.s[p.i] <= 'z' || p.s[p.i] >= 'A' && p.s[p.i] <= 'Z' || p.s[p.i] >= '0' && p.s[p.i] <= '9'); p.i++ {
		}
		return sfToken(p.s[start:p.i]), nil
	default:
		return nil, fmt.Errorf("at %d: %q starts no bare item", p.i, c)
	}
}

func (p *sfParser) integer() (int64, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for !p.eof() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits {
		return 0, fmt.Errorf("at %d: no digits", p.i)
	}
	if !p.eof() && p.s[p.i] == '.' {
		return 0, fmt.Errorf("at %d: a Decimal where an Integer should be", p.i)
	}
	if p.i-digits > 15 {
		return 0, fmt.Errorf("integer %s has more than 15 digits", p.s[start:p.i])
	}
	return strconv.ParseInt(p.s[start:p.i], 10, 64)
}

func (p *sfParser) str() (string, error) {
	var b strings.Builder
	for p.i++; !p.eof(); p.i++ {
		c := p.s[p.i]
		switch {
		case c == '\\':
			p.i++
			if p.eof() || p.s[p.i] != '"' && p.s[p.i] != '\\' {
				return "", fmt.Errorf("at %d: bad escape", p.i)
			}
			b.WriteByte(p.s[p.i])
		case c == '"':
			p.i++
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("at %d: byte %#x in a String", p.i, c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated string")
}

// checkPolicyField checks a RateLimit-Policy value against
// draft-ietf-httpapi-ratelimit-headers-10 §3: a non-empty List of Items
// whose value is a String; q REQUIRED, a non-negative Integer; qu a
// String; w a non-negative, non-zero Integer; pk a Byte Sequence. It
// returns the items.
func checkPolicyField(v string) ([]sfItem, error) {
	items, err := parseSFList(v)
	if err != nil {
		return nil, err
	}
	for i, it := range items {
		if _, ok := it.value.(string); !ok {
			return nil, fmt.Errorf("member %d: %T, want a String", i, it.value)
		}
		q, ok := it.param("q")
		if n, isInt := q.(int64); !ok || !isInt || n < 0 {
			return nil, fmt.Errorf("member %d: q %v (present %v), want a non-negative Integer", i, q, ok)
		}
		if qu, ok := it.param("qu"); ok {
			if _, isStr := qu.(string); !isStr {
				return nil, fmt.Errorf("member %d: qu %v, want a String", i, qu)
			}
		}
		if w, ok := it.param("w"); ok {
			if n, isInt := w.(int64); !isInt || n <= 0 {
				return nil, fmt.Errorf("member %d: w %v, want a positive Integer", i, w)
			}
		}
		if pk, ok := it.param("pk"); ok {
			if _, isBytes := pk.([]byte); !isBytes {
				return nil, fmt.Errorf("member %d: pk %v, want a Byte Sequence", i, pk)
			}
		}
	}
	return items, nil
}

// checkRateLimitField checks a RateLimit value against the draft's §4: a
// List of Items naming a policy (a String, as in RateLimit-Policy); r
// REQUIRED, a non-negative Integer; t a non-negative Integer; pk a Byte
// Sequence.
func checkRateLimitField(v string) ([]sfItem, error) {
	items, err := parseSFList(v)
	if err != nil {
		return nil, err
	}
	for i, it := range items {
		if _, ok := it.value.(string); !ok {
			return nil, fmt.Errorf("member %d: %T, want a String", i, it.value)
		}
		r, ok := it.param("r")
		if n, isInt := r.(int64); !ok || !isInt || n < 0 {
			return nil, fmt.Errorf("member %d: r %v (present %v), want a non-negative Integer", i, r, ok)
		}
		if t, ok := it.param("t"); ok {
			if n, isInt := t.(int64); !isInt || n < 0 {
				return nil, fmt.Errorf("member %d: t %v, want a non-negative Integer", i, t)
			}
		}
		if pk, ok := it.param("pk"); ok {
			if _, isBytes := pk.([]byte); !isBytes {
				return nil, fmt.Errorf("member %d: pk %v, want a Byte Sequence", i, pk)
			}
		}
	}
	return items, nil
}
