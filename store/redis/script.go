package redis

import (
	"crypto/sha1"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/algo"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// program is one Lua script, its text and SHA-1 (EVALSHA's name for it).
type program struct {
	src string
	sha string
}

func newProgram(src string) program {
	sum := sha1.Sum([]byte(src))
	return program{src: src, sha: hex.EncodeToString(sum[:])}
}

// families are the algorithm files of the decision script, indexed by
// family (see familyOf and KINDFILE in lua/prelude.lua).
var families = []string{
	"fixed_window",
	"sliding_log",
	"sliding_window",
	"bucket",
	"smooth",
	"concurrency",
}

// familyOf maps an algorithm to its family's bit.
func familyOf(k algo.Kind) uint8 {
	switch k {
	case algo.FixedWindow:
		return 1 << 0
	case algo.SlidingLog:
		return 1 << 1
	case algo.SlidingWindow:
		return 1 << 2
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		return 1 << 3
	case algo.SmoothBursty, algo.SmoothWarmup:
		return 1 << 4
	case algo.Concurrency:
		return 1 << 5
	}
	return 0
}

const allFamilies = 1<<6 - 1

var (
	// decideScripts holds the decision script for each single family and
	// for all of them (index allFamilies).
	decideScripts = func() (p [allFamilies + 1]program) {
		for i := range families {
			p[1<<i] = newProgram(decideSource(1 << i))
		}
		p[allFamilies] = newProgram(decideSource(allFamilies))
		return p
	}()
	decideScript  = decideScripts[allFamilies]
	inspectScript = newProgram(luaFile("inspect"))
	// flatTakes decides batches of single-key takes of fixed windows and
	// the bucket family, the common call, without main.lua's machinery.
	flatTakes = newProgram(luaFile("takes"))
	// loneTake decides one single-key take of a fixed window or the
	// bucket family sent on its own, a serial caller's call.
	loneTake = newProgram(luaFile("take"))
	// probeScript calls every command the others call (see Store.probe).
	probeScript = newProgram(luaFile("probe"))
)

// scriptFor returns the smallest script that holds the families in mask.
func scriptFor(mask uint8) program {
	if p := decideScripts[mask]; p.sha != "" {
		return p
	}
	return decideScript
}

// flatFamilies are the families lua/takes.lua decides.
var flatFamilies = familyOf(algo.FixedWindow) | familyOf(algo.GCRA)

// programFor returns the script for a call: flatTakes when it holds only
// single-key takes of (non-calendar) fixed windows and the bucket family,
// else scriptFor its families.
func programFor(sa *scriptArgs) program {
	if sa.singleTakes && !sa.calendar && sa.fams&^flatFamilies == 0 {
		return flatTakes
	}
	return scriptFor(sa.fams)
}

// loneSpec returns l as lua/take.lua's limit argument: the kind, then the
// parameters of spec as little-endian doubles ('<Bdddddd', unused ones
// zero; every value is an integer below 2^53, exact as a double), or ""
// when take.lua does not decide l: only fixed windows that are not
// calendar ones and the bucket family.
func loneSpec(l *algo.Limit) string {
	p := l.Params()
	var vals []int64
	per := int64(p.Period / time.Microsecond)
	switch p.Algorithm {
	case algo.FixedWindow:
		if p.Calendar != algo.CalendarNone {
			return ""
		}
		vals = []int64{p.Limit, per}
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		init := int64(-1)
		if p.InitialTokens != nil {
			init = *p.InitialTokens
		}
		vals = []int64{p.Limit, per, l.Capacity(), p.Delay, init, retainUS(p)}
	default:
		return ""
	}
	b := make([]byte, 1+6*8)
	b[0] = byte(p.Algorithm)
	for i, v := range vals {
		binary.LittleEndian.PutUint64(b[1+8*i:], math.Float64bits(float64(v)))
	}
	return string(b)
}

// decideSource assembles a decision script: the helpers, the families in
// mask each wrapped in a loader, then the entry point. Redis runs a
// script's whole body on every call, and defining every algorithm's
// functions costs more than a decision: so a family's functions are
// created only when a call uses one of its algorithms, and a call whose
// requests are all of one family uses a script holding only that family.
func decideSource(mask uint8) string {
	var b strings.Builder
	b.WriteString(luaFile("prelude"))
	if mask&(familyOf(algo.SlidingLog)|familyOf(algo.Concurrency)) != 0 {
		b.WriteString(luaFile("zset"))
	}
	for i, f := range families {
		if mask&(1<<i) != 0 {
			fmt.Fprintf(&b, "LOADERS[%q] = function()\n%s\nend\n", f, luaFile(f))
		}
	}
	b.WriteString(luaFile("main"))
	return b.String()
}

// luaFile returns lua/name.lua with its "--#include f.lua" lines replaced
// by those files: steps that several scripts run are written once and
// still run inline, with no function call.
func luaFile(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		// The files are embedded at build time; a missing one is a build
		// mistake that every test catches.
		panic("store/redis: missing embedded script " + name)
	}
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		if f, ok := strings.CutPrefix(strings.TrimSpace(l), "--#include "); ok {
			lines[i] = luaFile(strings.TrimSuffix(f, ".lua"))
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// Ops of the decision script (see lua/main.lua).
const (
	opTake     = "t"
	opReserve  = "T"
	opPeek     = "p"
	opRefund   = "r"
	opRollback = "b"
	opRelease  = "l"
	opRenew    = "n"
)

// spec returns the script arguments that describe l: its kind followed by
// the kind's parameters, exactly as lua/*.lua parse them. Floats are
// written in the shortest form that reads back to the same double.
func spec(l *algo.Limit) []string {
	p := l.Params()
	per := int64(p.Period / time.Microsecond)
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	kind := i(int64(p.Algorithm))
	switch p.Algorithm {
	case algo.FixedWindow:
		return []string{kind, i(p.Limit), i(per), i(int64(p.Calendar))}
	case algo.SlidingLog:
		return []string{kind, i(p.Limit), i(per)}
	case algo.SlidingWindow:
		n := int64(p.SubWindows)
		return []string{kind, i(p.Limit), i(per / n), i(n)}
	case algo.TokenBucket, algo.GCRA, algo.Shaper:
		init := int64(-1)
		if p.InitialTokens != nil {
			init = *p.InitialTokens
		}
		return []string{kind, i(p.Limit), i(per), i(l.Capacity()), i(p.Delay), i(init), i(retainUS(p))}
	case algo.SmoothBursty, algo.SmoothWarmup:
		s := smoothOf(l)
		return []string{kind, f(s.stable), f(s.coolDown), f(s.maxPermits), f(s.threshold), f(s.slope), i(int64(p.MaxWait / time.Microsecond)), i(l.MaxCost()), i(retainUS(p))}
	case algo.Concurrency:
		return []string{kind, i(p.Limit), i(int64(l.Window(0) / time.Microsecond))}
	}
	return nil
}

// retainUS is how long (µs) a full state is kept before it expires
// (algo.Params.Retain, which Compile sets to 0 where a fresh state is
// full).
func retainUS(p algo.Params) int64 { return int64(p.Retain / time.Microsecond) }

// smoothParams mirrors the values algo.Compile derives for the Smooth
// algorithms; the Lua script needs them as exact doubles.
type smoothParams struct {
	stable, coolDown, maxPermits, threshold, slope float64
}

// smoothOf recomputes them with algo's formulas in algo's order, so the
// doubles are bit for bit the ones the Go reference uses (the differential
// test holds this).
func smoothOf(l *algo.Limit) smoothParams {
	p := l.Params()
	var s smoothParams
	s.stable = float64(p.Period/time.Microsecond) / float64(p.Limit)
	if p.Algorithm == algo.SmoothBursty {
		s.maxPermits = p.MaxBurstSeconds * 1e6 / s.stable
		s.coolDown = s.stable
		return s
	}
	warm := float64(p.WarmupPeriod / time.Microsecond)
	cold := s.stable * p.ColdFactor
	s.threshold = 0.5 * warm / s.stable
	s.maxPermits = s.threshold + 2.0*warm/(s.stable+cold)
	s.slope = (cold - s.stable) / (s.maxPermits - s.threshold)
	s.coolDown = warm / s.maxPermits
	return s
}

// smallInts caches the decimal form of small costs and counts so that
// building a call's arguments does not allocate for them.
var smallInts = func() []string {
	s := make([]string, 1024)
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func itoa(v int64) string {
	if v >= 0 && v < int64(len(smallInts)) {
		return smallInts[v]
	}
	return strconv.FormatInt(v, 10)
}

func utoa(v uint64) string {
	if v < uint64(len(smallInts)) {
		return smallInts[v]
	}
	return strconv.FormatUint(v, 10)
}
