package store

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// BlankQuoted returns text with each %q-quoted part written "…": the
// stores quote a key (which holds descriptor values: a client's address,
// an API key) that way in their errors, so that what is left tells a
// failure's cause apart from the key it failed on.
func BlankQuoted(text string) string { return quoted.ReplaceAllString(text, `"…"`) }

// QuoteReply quotes the first line a server answered, for an error saying
// what kind of server it seems to be: cut at 40 bytes, in single quotes
// (BlankQuoted blanks what is in double quotes, and the line is what tells
// the server's kind), control characters and quotes written '?'.
func QuoteReply(line string) string {
	if len(line) > 40 {
		line = line[:40] + "…"
	}
	return "'" + strings.Map(func(r rune) rune {
		if r < ' ' || r == '\'' || r == 0x7f {
			return '?'
		}
		return r
	}, line) + "'"
}

// JoinAlike joins errs, the failures of a call's parts (keys, slots,
// servers), telling errors that differ only in the keys they quote
// (BlankQuoted) once, with how many more parts failed alike — "(and 2 more
// keys alike)", or with noun "" "(and 2 more alike)": a server that went
// away fails every key of a call with one cause, which would otherwise be
// repeated, a key at a time, in every log line and readiness text that
// quotes the error. nil for none; one error, or errors all alike, as the
// first of them (with the count); else errors.Join of each kind's first.
func JoinAlike(errs []error, noun string) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	var out []error
	var more []int
	seen := make(map[string]int, 2)
	for _, err := range errs {
		k := BlankQuoted(err.Error())
		if i, ok := seen[k]; ok {
			more[i]++
			continue
		}
		seen[k] = len(out)
		out, more = append(out, err), append(more, 0)
	}
	for i, n := range more {
		switch {
		case n == 0:
		case noun == "":
			out[i] = fmt.Errorf("%w (and %d more alike)", out[i], n)
		case n == 1:
			out[i] = fmt.Errorf("%w (and 1 more %s alike)", out[i], noun)
		default:
			out[i] = fmt.Errorf("%w (and %d more %ss alike)", out[i], n, noun)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// quoted finds the %q-quoted parts of a text.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// URLParts are a store URL cut the way the store URL parsers cut it (see
// SplitURL).
type URLParts struct {
	// Scheme is what precedes "://", as written.
	Scheme string
	// UserInfo is everything between "://" and the last '@' of the URL:
	// "user:pass", or "user:pass@master" for redis-sentinel://. A password
	// may hold '/', '?', '#', ':' and '@' unescaped.
	UserInfo string
	// HasUserInfo is whether the URL has an '@' after "://".
	HasUserInfo bool
	// Rest follows the last '@' (or "://" when there is none): the hosts,
	// then any path, query or fragment.
	Rest string
}

// SplitURL cuts a store URL into its scheme, user information and the
// rest; ok is false when raw has no "://". The user information ends at
// the last '@' of the URL, not at the first '/', '?' or '#' as in an HTTP
// URL: host lists and database numbers never hold an '@', while a
// password pasted as it is may hold any of them. The store URL parsers
// (package redis, storeurl) and RedactURL all cut here, so a password
// RedactURL hides is exactly the one the parsers read.
func SplitURL(raw string) (p URLParts, ok bool) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return URLParts{}, false
	}
	p.Scheme, p.Rest = scheme, rest
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		p.UserInfo, p.HasUserInfo, p.Rest = rest[:at], true, rest[at+1:]
	}
	return p, true
}

// redacted replaces a password.
const redacted = "xxxxx"

// RedactURL returns a store URL with its password replaced by "xxxxx", for
// error messages and logs; credentials without a ':' (redis://secret@host,
// which redis-cli reads as a password) are hidden whole; a URL without
// credentials is returned as is.
//
// The password is found as the parsers find it (SplitURL): what follows
// the first ':' of the user information, which ends at the URL's last '@'
// (for redis-sentinel://, the "@master" that ends it is kept). Escaped or
// not, it never shows, whatever it holds. memcached:// takes no
// credentials, so all of its user information is hidden; so is everything
// before the last '@' of a URL without "://". On another kind of URL (an
// HTTP one) the same cut may hide more than the password, never less.
func RedactURL(raw string) string {
	p, ok := SplitURL(raw)
	if !ok {
		if at := strings.LastIndexByte(raw, '@'); at >= 0 {
			return redacted + raw[at:]
		}
		return raw
	}
	if !p.HasUserInfo {
		return raw
	}
	creds, master := p.UserInfo, ""
	switch strings.ToLower(p.Scheme) {
	case "memcached", "memcacheds":
		creds = redacted
	case "redis-sentinel":
		if i := strings.LastIndexByte(creds, '@'); i >= 0 && !strings.Contains(creds[i:], ":") {
			creds, master = creds[:i], creds[i:]
		} else if !strings.Contains(creds, ":") {
			creds, master = "", creds // a master name alone
		}
		// A master name with a ':' is refused by the parser: it is the
		// password of a URL whose master was left out, hidden with the
		// credentials.
	}
	if name, _, hasPass := strings.Cut(creds, ":"); hasPass {
		creds = name + ":" + redacted
	} else if creds != "" {
		// Credentials without ':' (redis://secret@host): a user name to
		// the parsers, a password to redis-cli and to whoever wrote it.
		creds = redacted
	}
	return p.Scheme + "://" + creds + master + "@" + p.Rest
}
