package chart

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"
)

// Chart is one line chart.
type Chart struct {
	// Title is drawn above the plot.
	Title string
	// XLabel and YLabel name the axes, units included, e.g. "time (s)".
	XLabel, YLabel string
	// Width and Height are the size in pixels. Default 960×540.
	Width, Height int
	// Lines are drawn in order, so later ones are on top.
	Lines []Line
	// HRules are horizontal reference lines (a limit); VRules vertical ones
	// (an event such as a scale-out).
	HRules, VRules []Rule
	// YMax, when > 0, fixes the top of the y axis; by default it fits the
	// data and the rules with some headroom. The y axis starts at 0 unless a
	// value is negative.
	YMax float64
}

// Line is one series.
type Line struct {
	// Name is the legend entry.
	Name string
	// X and Y are the points, of equal length, X increasing.
	X, Y []float64
	// Color of the stroke.
	Color color.RGBA
	// Dashed draws the line dashed.
	Dashed bool
	// Width is the stroke width in pixels. Default 2.
	Width float64
}

// Rule is a reference line at a value of one axis.
type Rule struct {
	// At is the value on the axis.
	At float64
	// Label is written beside the rule.
	Label string
	// Color of the rule. Default a dark red.
	Color color.RGBA
}

// Colours the simulator's charts use: the articles drew the perfect window
// in grey and the contender dashed in orange.
var (
	Grey   = color.RGBA{0x8c, 0x8c, 0x8c, 0xff}
	Orange = color.RGBA{0xff, 0x7f, 0x0e, 0xff}
	Red    = color.RGBA{0xc0, 0x1c, 0x1c, 0xff}
	Light  = color.RGBA{0xcc, 0xcc, 0xcc, 0xff}
	// Palette is for charts with many lines.
	Palette = []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0x94, 0x67, 0xbd, 0xff},
		{0xff, 0x7f, 0x0e, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff},
		{0x17, 0xbe, 0xcf, 0xff}, {0xbc, 0xbd, 0x22, 0xff}, {0x39, 0x3b, 0x79, 0xff},
		{0xd6, 0x27, 0x28, 0xff},
	}
)

// ErrChart reports a chart that cannot be drawn.
var ErrChart = errors.New("chart")

// layout is the geometry shared by both renderers.
type layout struct {
	w, h                  float64
	left, right, top, bot float64 // plot area edges in pixels
	x0, x1, y0, y1        float64 // data ranges
	xticks, yticks        []float64
	legendX               float64
}

const (
	charW     = 7.0 // the bitmap font's advance; SVG text is sized to match
	lineH     = 16.0
	titleSize = 2 // the title is drawn at twice the size
)

// values is "1 x value", "2 x values": n values of the axis, plural
// unless n is 1.
func values(n int, axis string) string {
	if n == 1 {
		return "1 " + axis + " value"
	}
	return fmt.Sprintf("%d %s values", n, axis)
}

func (c *Chart) validate() error {
	for i, l := range c.Lines {
		if len(l.X) != len(l.Y) {
			return fmt.Errorf("%w: line %d (%q): %s and %s", ErrChart, i, l.Name, values(len(l.X), "x"), values(len(l.Y), "y"))
		}
	}
	if c.Width < 0 || c.Height < 0 || c.Width > 8000 || c.Height > 8000 {
		return fmt.Errorf("%w: size %d×%d out of range", ErrChart, c.Width, c.Height)
	}
	for _, rules := range []struct {
		name string
		r    []Rule
	}{{"hrule", c.HRules}, {"vrule", c.VRules}} {
		for i, r := range rules.r {
			if !finite(r.At) {
				return fmt.Errorf("%w: %s %d (%q) at %v: want a finite value", ErrChart, rules.name, i, r.Label, r.At)
			}
		}
	}
	if !finite(c.YMax) {
		return fmt.Errorf("%w: YMax %v: want a finite value (0 fits the data)", ErrChart, c.YMax)
	}
	return nil
}

func (c *Chart) layout() layout {
	L := layout{w: float64(c.Width), h: float64(c.Height)}
	if L.w == 0 {
		L.w = 960
	}
	if L.h == 0 {
		L.h = 540
	}
	L.x0, L.x1 = math.Inf(1), math.Inf(-1)
	L.y0, L.y1 = 0, math.Inf(-1)
	for _, l := range c.Lines {
		for i := range l.X {
			if !finite(l.X[i]) || !finite(l.Y[i]) {
				continue
			}
			x, y := bounded(l.X[i]), bounded(l.Y[i])
			L.x0, L.x1 = math.Min(L.x0, x), math.Max(L.x1, x)
			L.y0, L.y1 = math.Min(L.y0, y), math.Max(L.y1, y)
		}
	}
	for _, r := range c.HRules {
		L.y1 = math.Max(L.y1, bounded(r.At))
	}
	if math.IsInf(L.x0, 1) {
		L.x0, L.x1 = 0, 1
	}
	if L.x0 > 0 && L.x0 < (L.x1-L.x0)*0.1 {
		L.x0 = 0 // a series that starts just after the origin, e.g. at the end of its first bin
	}
	if L.x1 <= L.x0 {
		L.x1 = L.x0 + unit(L.x0)
	}
	if math.IsInf(L.y1, -1) || L.y1 <= L.y0 {
		L.y1 = L.y0 + unit(L.y0)
	}
	L.y1 += (L.y1 - L.y0) * 0.08
	if c.YMax > 0 {
		L.y1 = math.Max(bounded(c.YMax), L.y0+unit(L.y0))
	}
	L.yticks = ticks(L.y0, L.y1)
	L.y1 = math.Max(L.y1, L.yticks[len(L.yticks)-1])
	L.xticks = ticks(L.x0, L.x1)
	// Room for the widest y tick label, the legend on the right, the title
	// and the x axis label.
	ylab := 0
	for _, t := range L.yticks {
		ylab = max(ylab, len(fmtTick(t, L.yticks)))
	}
	legend := 0
	for _, l := range c.Lines {
		legend = max(legend, runeLen(l.Name))
	}
	L.left = 30 + float64(ylab)*charW + 10
	L.top = 20 + lineH*titleSize + 14
	L.bot = L.h - (lineH*2 + 20)
	L.right = L.w - (float64(legend)*charW + 60)
	if L.right < L.left+200 {
		L.right = L.w - 20
	}
	L.legendX = L.right + 16
	return L
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// maxValue bounds the values the axes are fitted to, so that a range, its
// headroom and its ticks stay finite; a point beyond is drawn at the edge.
const maxValue = math.MaxFloat64 / 8

func bounded(v float64) float64 { return math.Max(-maxValue, math.Min(maxValue, v)) }

// unit is the span given to an axis whose values are all v: 1, or more
// where v is so large that v + 1 is v.
func unit(v float64) float64 { return math.Max(1, math.Abs(v)*1e-9) }

func runeLen(s string) int { return len([]rune(s)) }

func (L *layout) px(x float64) float64 {
	return L.left + (x-L.x0)/(L.x1-L.x0)*(L.right-L.left)
}

func (L *layout) py(y float64) float64 {
	return L.bot - (y-L.y0)/(L.y1-L.y0)*(L.bot-L.top)
}

// ticks returns round values covering [lo, hi]: steps of 1, 2 or 5 × 10^k,
// about six of them. It always returns at least one value: lo and hi
// themselves when the span is not a positive finite number, or when the
// values are so far from 0 that adding a step does not change them.
func ticks(lo, hi float64) []float64 {
	span := hi - lo
	if !finite(span) || span <= 0 {
		return []float64{lo, hi}
	}
	raw := span / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	if !(step > 0) || !finite(start) || start+step == start {
		return []float64{lo, hi}
	}
	// The first tick at or above hi (to within rounding) is the last.
	n := int(math.Ceil((hi-start)/step - 1e-9))
	out := make([]float64, 0, n+1)
	for i := range n + 1 {
		out = append(out, math.Round((start+float64(i)*step)/step)*step)
	}
	return out
}

// fmtTick prints a tick with as many decimals as its step needs.
func fmtTick(v float64, all []float64) string {
	dec := 0
	if len(all) > 1 {
		step := all[1] - all[0]
		for dec < 6 && math.Abs(step*math.Pow(10, float64(dec))-math.Round(step*math.Pow(10, float64(dec)))) > 1e-9 {
			dec++
		}
	}
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if s == "-0" {
		s = "0"
	}
	return s
}

// dashes splits a polyline into the pieces a dash pattern keeps.
func dashes(pts [][2]float64, on, off float64) [][][2]float64 {
	var out [][][2]float64
	var cur [][2]float64
	pos, drawing := 0.0, true
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		seg := math.Hypot(b[0]-a[0], b[1]-a[1])
		done := 0.0
		for done < seg {
			limit := on
			if !drawing {
				limit = off
			}
			step := math.Min(limit-pos, seg-done)
			t0, t1 := done/seg, (done+step)/seg
			p0 := [2]float64{a[0] + (b[0]-a[0])*t0, a[1] + (b[1]-a[1])*t0}
			p1 := [2]float64{a[0] + (b[0]-a[0])*t1, a[1] + (b[1]-a[1])*t1}
			if drawing {
				if len(cur) == 0 {
					cur = append(cur, p0)
				}
				cur = append(cur, p1)
			}
			done += step
			pos += step
			if pos >= limit-1e-9 {
				pos = 0
				if drawing && len(cur) > 1 {
					out = append(out, cur)
				}
				cur = nil
				drawing = !drawing
			}
		}
	}
	if drawing && len(cur) > 1 {
		out = append(out, cur)
	}
	return out
}

// points maps a line to pixels, skipping non-finite values and clipping
// values outside the y range to its edges.
func (L *layout) points(l Line) [][2]float64 {
	pts := make([][2]float64, 0, len(l.X))
	for i := range l.X {
		if !finite(l.X[i]) || !finite(l.Y[i]) {
			continue
		}
		y := math.Max(L.y0, math.Min(L.y1, l.Y[i]))
		pts = append(pts, [2]float64{L.px(l.X[i]), L.py(y)})
	}
	return pts
}

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func xmlEscape(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}

func width(l Line) float64 {
	if l.Width > 0 {
		return l.Width
	}
	return 2
}

func ruleColor(r Rule) color.RGBA {
	if r.Color.A == 0 {
		return Red
	}
	return r.Color
}
