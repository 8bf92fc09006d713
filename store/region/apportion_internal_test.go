package region

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestApportion: the parts add up to the whole exactly, each is within a
// unit of its exact proportion, and a larger weight never gets less; for
// values up to MaxInt64 and weights up to MaxWeight.
func TestApportion(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 1 + r.IntN(6)
		w := make([]int64, n)
		var total int64
		for i := range w {
			w[i] = 1 + r.Int64N(MaxWeight)
			if r.IntN(3) == 0 {
				w[i] = 1 + r.Int64N(3)
			}
			total += w[i]
		}
		v := r.Int64N(1000)
		switch r.IntN(3) {
		case 1:
			v = r.Int64()
		case 2:
			v = math.MaxInt64 - r.Int64N(10)
		}
		parts := apportion(v, w, total)
		sum := new(big.Int)
		for i, p := range parts {
			sum.Add(sum, big.NewInt(p))
			// |p − v·w/total| < 1, in exact arithmetic.
			exact := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(v), big.NewInt(w[i])), big.NewInt(total))
			diff := new(big.Rat).Sub(new(big.Rat).SetInt64(p), exact)
			if diff.Abs(diff).Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("apportion(%d, %v): part %d is %d, exact %s", v, w, i, p, exact.FloatString(3))
			}
			for j := range parts {
				if w[j] > w[i] && parts[j] < parts[i] {
					t.Fatalf("apportion(%d, %v): weight %d got %d, less than weight %d's %d", v, w, w[j], parts[j], w[i], parts[i])
				}
			}
		}
		if sum.Cmp(big.NewInt(v)) != 0 {
			t.Fatalf("apportion(%d, %v) = %v, adding up to %s", v, w, parts, sum)
		}
	}
}
