package limiter_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/algo"
	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memory"
	"github.com/floodgate/floodgate/store/storetest"
)

// TestAllowAllSmoothRollBackInexact pins the exception AllowAll's doc
// states: a refused AllowAll across stores that took from a cold
// SmoothWarmup limit before another store refused charges nothing, but
// leaves the warm-up limit's next admission waiting where, had AllowAll
// not been called, it would not.
func TestAllowAllSmoothRollBackInexact(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	st1 := newStore(t, memory.WithClock(clock.Now))
	st2 := newStore(t, memory.WithClock(clock.Now))
	ctx := t.Context()
	p := algo.Params{Algorithm: algo.SmoothWarmup, Limit: 10, Period: time.Second, WarmupPeriod: 30 * time.Second, MaxWait: time.Hour}
	warm := newLimiter(t, st1, "warm", p)
	other := newLimiter(t, st1, "other", p)
	user := newLimiter(t, st2, "user", algo.Params{Algorithm: algo.FixedWindow, Limit: 1, Period: time.Minute})
	if d, _ := user.Allow(ctx, "alice"); !d.Allowed {
		t.Fatal("could not spend user")
	}
	res, err := limiter.AllowAll(ctx, []limiter.Hit{{Limiter: warm, Key: "k", Cost: 100}, {Limiter: user, Key: "alice"}})
	if err != nil || res.Allowed {
		t.Fatalf("AllowAll = %+v, %v; want refused", res, err)
	}
	after, _ := warm.Allow(ctx, "k")
	untouched, _ := other.Allow(ctx, "k")
	if !after.Allowed || !untouched.Allowed || untouched.Delay != 0 {
		t.Fatalf("next admissions: %+v after the roll-back, %+v untouched", after, untouched)
	}
	if after.Delay < time.Second || after.Delay >= p.WarmupPeriod {
		t.Errorf("next admission after the roll-back waits %v; the docs say a delay of up to about the warm-up period (%v)", after.Delay, p.WarmupPeriod)
	}
}

// TestGiveBackDocs checks that every doc promising to give units back says
// that it is inexact for the Smooth algorithms.
func TestGiveBackDocs(t *testing.T) {
	fset := token.NewFileSet()
	docs := map[string]string{}
	for _, file := range []string{"allowall.go", "limiter.go", "wait.go", "local.go"} {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Doc == nil {
				continue
			}
			name := fn.Name.Name
			if fn.Recv != nil {
				typ := fn.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				name = typ.(*ast.Ident).Name + "." + name
			}
			docs[name] = fn.Doc.Text()
		}
	}
	for _, name := range []string{"AllowAll", "Result.Cancel", "Limiter.Reserve", "Reservation.Cancel", "Limiter.Wait", "Local.Wait", "LocalReservation.Cancel"} {
		doc, ok := docs[name]
		if !ok {
			t.Errorf("%s: no doc", name)
			continue
		}
		flat := strings.Join(strings.Fields(doc), " ")
		if !strings.Contains(flat, "Smooth") || !(strings.Contains(flat, "inexact") || strings.Contains(flat, "stricter")) {
			t.Errorf("%s's doc does not say that giving back is inexact for the Smooth algorithms", name)
		}
	}
}
