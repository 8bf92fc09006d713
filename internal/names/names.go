// Package names compares the short names users type (configuration
// fields, flags, commands) with the ones that exist, for "did you mean"
// hints.
package names

import (
	"flag"
	"fmt"
	"strings"
)

// EditDistance is the Levenshtein distance of a and b: the fewest
// single-byte insertions, deletions and substitutions that turn one into
// the other. It is meant for short names: when either is longer than 64
// bytes it returns the longer length rather than spend quadratic time on
// arbitrary input.
func EditDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Closest returns the name in known that s is most likely a typo of: the
// nearest by edit distance, at most 2 and less than s is long (so that a
// one-letter s suggests nothing at random), or one that s is a prefix of
// (two letters at least); ties go to the alphabetically first. "" when
// there is none.
func Closest(s string, known []string) string {
	best, bestD := "", -1
	for _, k := range known {
		d := EditDistance(s, k)
		if d > min(2, len(s)-1) && !(len(s) >= 2 && strings.HasPrefix(k, s)) {
			continue
		}
		if bestD < 0 || d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	return best
}

// FlagHint returns " (did you mean --store?)" when err is the flag
// package's error for an undefined flag and a flag of fs is close to the
// name typed (see Closest); "" otherwise. A one-letter flag is shown with
// one dash.
func FlagHint(fs *flag.FlagSet, err error) string {
	if err == nil {
		return ""
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	s := Closest(name, known)
	if s == "" {
		return ""
	}
	dashes := "--"
	if len(s) == 1 {
		dashes = "-"
	}
	return fmt.Sprintf(" (did you mean %s%s?)", dashes, s)
}
