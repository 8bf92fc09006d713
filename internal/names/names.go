// Package names compares the short names users type (configuration
// fields, flags, commands) with the ones that exist, for "did you mean"
// hints.
package names

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
