package store

import "strings"

// RedactURL returns a store URL with its password replaced by "xxxxx", for
// error messages and logs. A URL without a password is returned as is.
func RedactURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	end := strings.IndexByte(rest, '/')
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return raw
	}
	colon := strings.IndexByte(rest[:at], ':')
	if colon < 0 {
		return raw
	}
	stop := at
	if j := strings.IndexByte(rest[colon:at], '@'); j >= 0 {
		stop = colon + j // redis-sentinel://user:pass@master@...
	}
	return raw[:i+3] + rest[:colon+1] + "xxxxx" + rest[stop:]
}
