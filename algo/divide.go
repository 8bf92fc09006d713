package algo

import "math/bits"

// divisor divides by a constant without a division instruction: a 64-bit
// DIV costs tens of cycles, a multiplication by a precomputed reciprocal
// three. Compile makes one per divisor an algorithm divides by on every
// decision (the period and the rate of the buckets, the period of the
// fixed windows). The quotients are exact for every uint64 numerator: the
// method is Granlund and Montgomery's ("Division by invariant integers
// using multiplication", PLDI 1994, figure 4.1), and TestDivisor and
// FuzzDivisor compare it with the / operator. The zero divisor is unusable.
type divisor struct {
	m        uint64 // ⌊2^64·(2^l − d) ÷ d⌋ + 1, with l = ⌈log2 d⌉
	sh1, sh2 uint8  // min(l, 1) and max(l − 1, 0)
}

// newDivisor returns the divisor for d, which must be between 1 and 2^63
// (the algorithms' divisors are below 2^53).
func newDivisor(d uint64) divisor {
	l := uint(bits.Len64(d - 1)) // ⌈log2 d⌉; 0 for d = 1
	// 2^l − d < d, so the quotient fits in 64 bits (Div64's requirement),
	// and it stays below 2^64 − 1, so adding 1 does not wrap.
	q, _ := bits.Div64(uint64(1)<<l-d, 0, d)
	v := divisor{m: q + 1}
	if l > 0 {
		v.sh1, v.sh2 = 1, uint8(l-1)
	}
	return v
}

// div returns ⌊n ÷ d⌋.
func (v divisor) div(n uint64) uint64 {
	t, _ := bits.Mul64(v.m, n)
	return (t + (n-t)>>v.sh1) >> v.sh2
}

// ceil returns ⌈a ÷ d⌉ for a > 0, and 0 for a <= 0 (as ceilDiv).
func (v divisor) ceil(a int64) int64 {
	if a <= 0 {
		return 0
	}
	return int64(v.div(uint64(a-1))) + 1
}
