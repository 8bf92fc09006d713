package chart

import (
	"bytes"
	"errors"
	"image/color"
	"image/png"
	"math"
	"reflect"
	"strings"
	"testing"
)

func sample() *Chart {
	return &Chart{
		Title: "fixed_window vs a perfect sliding window", XLabel: "time (s)", YLabel: "requests in the last 1m",
		Lines: []Line{
			{Name: "perfect", X: []float64{0, 30, 60, 90, 120}, Y: []float64{0, 50, 100, 100, 100}, Color: Grey},
			{Name: "fixed_window 4×15s", X: []float64{0, 30, 60, 90, 120}, Y: []float64{0, 50, 100, 50, 100}, Color: Orange, Dashed: true},
		},
		HRules: []Rule{{At: 100, Label: "limit 100 per 1m"}},
		VRules: []Rule{{At: 60, Label: "scale to 8"}},
	}
}

func TestSVGHasAxesLegendAndStyles(t *testing.T) {
	var b bytes.Buffer
	if err := sample().SVG(&b); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{
		"<svg xmlns=", "fixed_window vs a perfect sliding window", ">time (s)<", "rotate(-90)", ">requests in the last 1m<",
		`stroke="#8c8c8c"`, `stroke="#ff7f0e" stroke-width="2.0" stroke-dasharray="8 5"`, ">limit 100 per 1m<",
		">fixed_window 4×15s<", ">perfect<", ">scale to 8<", ">120<", "</svg>",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestPNGDrawsTheLines(t *testing.T) {
	c := sample()
	img, err := c.Image()
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 960 || b.Dy() != 540 {
		t.Fatalf("size %v, want 960×540", b)
	}
	// The grey line's middle point (x = 30, y = 50) is drawn in grey.
	L := c.layout()
	x, y := int(L.px(30)), int(L.py(50))
	near := func(want color.RGBA) bool {
		for dy := -1; dy <= 1; dy++ {
			for dx := -1; dx <= 1; dx++ {
				p := img.RGBAAt(x+dx, y+dy)
				if absDiff(p.R, want.R) < 40 && absDiff(p.G, want.G) < 40 && absDiff(p.B, want.B) < 40 {
					return true
				}
			}
		}
		return false
	}
	if !near(Grey) && !near(Orange) {
		t.Errorf("no line colour near (%d, %d): %v", x, y, img.RGBAAt(x, y))
	}
	// A corner of the plot far from every line stays white.
	if p := img.RGBAAt(int(L.right)-5, int(L.bot)-5); p != (color.RGBA{255, 255, 255, 255}) {
		t.Errorf("empty plot corner is %v, want white", p)
	}
	var b bytes.Buffer
	if err := c.PNG(&b); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatalf("PNG does not decode: %v", err)
	}
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

func TestRenderingIsDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := sample().PNG(&a); err != nil {
		t.Fatal(err)
	}
	if err := sample().PNG(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two renderings of one chart differ")
	}
}

func TestBadChartsAreErrors(t *testing.T) {
	c := sample()
	c.Lines[0].Y = c.Lines[0].Y[:2]
	if err := c.SVG(&bytes.Buffer{}); !errors.Is(err, ErrChart) {
		t.Errorf("mismatched series: %v, want ErrChart", err)
	}
	if _, err := (&Chart{Width: 100000}).Image(); !errors.Is(err, ErrChart) {
		t.Errorf("huge chart: %v, want ErrChart", err)
	}
	// Empty and non-finite data still draw.
	empty := &Chart{Lines: []Line{{X: []float64{1, 2}, Y: []float64{nanValue(), math.Inf(1)}}}}
	if err := empty.PNG(&bytes.Buffer{}); err != nil {
		t.Errorf("chart of non-finite values: %v", err)
	}
}

func nanValue() float64 { return math.NaN() }

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 600, []float64{0, 100, 200, 300, 400, 500, 600}},
		{0, 108, []float64{0, 20, 40, 60, 80, 100, 120}},
		{0, 1, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
	} {
		got := ticks(tc.lo, tc.hi)
		if len(got) != len(tc.want) || got[0] != tc.want[0] || got[len(got)-1] < tc.hi {
			t.Errorf("ticks(%v, %v) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
	if got := fmtTick(0.30000000000000004, []float64{0.1, 0.2}); got != "0.3" {
		t.Errorf("fmtTick = %q, want 0.3", got)
	}
}

func TestDashes(t *testing.T) {
	got := dashes([][2]float64{{0, 0}, {26, 0}}, 8, 5)
	want := [][][2]float64{{{0, 0}, {8, 0}}, {{13, 0}, {21, 0}}, {{26, 0}, {26, 0}}}
	if !reflect.DeepEqual(got[:2], want[:2]) {
		t.Errorf("dashes = %v, want %v…", got, want[:2])
	}
}

func BenchmarkPNG(b *testing.B) {
	c := sample()
	n := 3600
	xs, ys := make([]float64, n), make([]float64, n)
	for i := range n {
		xs[i], ys[i] = float64(i), float64(i%100)
	}
	c.Lines = append(c.Lines, Line{Name: "long", X: xs, Y: ys, Color: Palette[0], Dashed: true})
	b.ReportAllocs()
	for b.Loop() {
		if err := c.PNG(&bytes.Buffer{}); err != nil {
			b.Fatal(err)
		}
	}
}

// A line whose x and y values differ in number says how many of each,
// singular for 1.
func TestMismatchedLineCountsOfOne(t *testing.T) {
	c := &Chart{Lines: []Line{{Name: "l", X: []float64{1}, Y: []float64{1, 2}}}}
	err := c.SVG(&bytes.Buffer{})
	if want := `line 0 ("l"): 1 x value and 2 y values`; !errors.Is(err, ErrChart) || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("SVG: %v, want an ErrChart ending %q", err, want)
	}
}

// A rule or YMax that is not a finite number is an error that names it;
// it made the tick loop return nothing and the layout index it at -1.
func TestNonFiniteRulesAreErrors(t *testing.T) {
	line := []Line{{X: []float64{0, 1}, Y: []float64{1, 2}}}
	for _, tc := range []struct {
		c    *Chart
		want string
	}{
		{&Chart{Lines: line, HRules: []Rule{{At: math.Inf(1), Label: "limit"}}}, `hrule 0 ("limit") at +Inf: want a finite value`},
		{&Chart{Lines: line, HRules: []Rule{{At: 1}, {At: nanValue()}}}, `hrule 1 ("") at NaN: want a finite value`},
		{&Chart{Lines: line, VRules: []Rule{{At: math.Inf(-1), Label: "scale"}}}, `vrule 0 ("scale") at -Inf: want a finite value`},
		{&Chart{Lines: line, YMax: math.Inf(1)}, "YMax +Inf: want a finite value (0 fits the data)"},
	} {
		for name, draw := range map[string]func() error{
			"SVG": func() error { return tc.c.SVG(&bytes.Buffer{}) },
			"PNG": func() error { return tc.c.PNG(&bytes.Buffer{}) },
		} {
			if err := draw(); !errors.Is(err, ErrChart) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an ErrChart ending %q", name, err, tc.want)
			}
		}
	}
}

// Finite values however large, or so far from 0 that a tick step does not
// change them, draw: the ticks stay finite and few. Values near 1.7e308
// overflowed the headroom to +Inf (index -1 on no ticks), and an axis of
// one value at 1e17 (where 1e17 + 1 is 1e17) or two 16 apart looped for
// ever adding a step that changed nothing.
func TestExtremeValuesDraw(t *testing.T) {
	for name, l := range map[string]Line{
		"near max":       {X: []float64{0, 1}, Y: []float64{1, 1.7e308}},
		"both signs":     {X: []float64{0, 1}, Y: []float64{-1e308, 1e308}},
		"one x far out":  {X: []float64{1e17}, Y: []float64{1}},
		"x 16 apart far": {X: []float64{1e17, 1e17 + 16}, Y: []float64{1, 2}},
		"y 16 apart far": {X: []float64{0, 1}, Y: []float64{1e17, 1e17 + 16}},
	} {
		c := &Chart{Lines: []Line{l}, HRules: []Rule{{At: 1.7e308}}}
		if name != "near max" && name != "both signs" {
			c.HRules = nil
		}
		if err := c.SVG(&bytes.Buffer{}); err != nil {
			t.Errorf("%s: SVG: %v", name, err)
		}
		if err := c.PNG(&bytes.Buffer{}); err != nil {
			t.Errorf("%s: PNG: %v", name, err)
		}
		L := c.layout()
		for _, ts := range [][]float64{L.xticks, L.yticks} {
			if len(ts) == 0 || len(ts) > 20 {
				t.Errorf("%s: %d ticks, want 1 to 20", name, len(ts))
			}
			for _, v := range ts {
				if !finite(v) {
					t.Errorf("%s: tick %v", name, v)
				}
			}
		}
	}
}
