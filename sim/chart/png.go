package chart

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// PNG writes the chart as a PNG image: the same layout as SVG, drawn with an
// anti-aliasing rasteriser and a 7×13 bitmap font (the title twice as big).
func (c *Chart) PNG(w io.Writer) error {
	img, err := c.Image()
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.DefaultCompression}
	return enc.Encode(w, img)
}

// Image rasterises the chart.
func (c *Chart) Image() (*image.RGBA, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	L := c.layout()
	r := &raster{img: image.NewRGBA(image.Rect(0, 0, int(L.w), int(L.h)))}
	draw.Draw(r.img, r.img.Bounds(), image.White, image.Point{}, draw.Src)
	ink := color.RGBA{0x22, 0x22, 0x22, 0xff}
	grid := color.RGBA{0xe6, 0xe6, 0xe6, 0xff}
	r.text(c.Title, L.left, 20+lineH*titleSize-6, ink, titleSize, 0)
	for _, t := range L.yticks {
		y := L.py(t)
		r.stroke([][2]float64{{L.left, y}, {L.right, y}}, 1, grid)
		s := fmtTick(t, L.yticks)
		r.text(s, L.left-6-float64(runeLen(s))*charW, y+4, ink, 1, 0)
	}
	for _, t := range L.xticks {
		if t < L.x0-1e-9 || t > L.x1+1e-9 {
			continue
		}
		x := L.px(t)
		r.stroke([][2]float64{{x, L.top}, {x, L.bot}}, 1, grid)
		s := fmtTick(t, L.xticks)
		r.text(s, x-float64(runeLen(s))*charW/2, L.bot+16, ink, 1, 0)
	}
	frame := color.RGBA{0x44, 0x44, 0x44, 0xff}
	r.stroke([][2]float64{{L.left, L.top}, {L.right, L.top}, {L.right, L.bot}, {L.left, L.bot}, {L.left, L.top}}, 1, frame)
	r.text(c.XLabel, (L.left+L.right)/2-float64(runeLen(c.XLabel))*charW/2, L.bot+36, ink, 1, 0)
	r.text(c.YLabel, 20, (L.top+L.bot)/2+float64(runeLen(c.YLabel))*charW/2, ink, 1, 90)
	for _, h := range c.HRules {
		y := L.py(h.At)
		r.dashed([][2]float64{{L.left, y}, {L.right, y}}, 1.5, ruleColor(h), 2, 3)
		if h.Label != "" {
			w := float64(runeLen(ascii.Replace(h.Label))) * charW
			r.box(L.right-8-w, y-18, w+4, 16)
			r.text(h.Label, L.right-6-w, y-5, ruleColor(h), 1, 0)
		}
	}
	for _, v := range c.VRules {
		x := L.px(v.At)
		r.dashed([][2]float64{{x, L.top}, {x, L.bot}}, 1.5, ruleColor(v), 2, 3)
		if v.Label != "" {
			r.box(x+2, L.top+2, float64(runeLen(ascii.Replace(v.Label)))*charW+4, 16)
			r.text(v.Label, x+4, L.top+14, ruleColor(v), 1, 0)
		}
	}
	r.clip = image.Rect(int(L.left), int(L.top), int(math.Ceil(L.right))+1, int(math.Ceil(L.bot))+1)
	for _, l := range c.Lines {
		pts := L.points(l)
		if l.Dashed {
			r.dashed(pts, width(l), l.Color, 8, 5)
		} else {
			r.stroke(pts, width(l), l.Color)
		}
	}
	r.clip = image.Rectangle{}
	for i, l := range c.Lines {
		y := L.top + 10 + float64(i)*lineH*1.25
		seg := [][2]float64{{L.legendX, y}, {L.legendX + 30, y}}
		if l.Dashed {
			r.dashed(seg, width(l), l.Color, 8, 5)
		} else {
			r.stroke(seg, width(l), l.Color)
		}
		r.text(l.Name, L.legendX+36, y+4, ink, 1, 0)
	}
	return r.img, nil
}

// box lightens a rectangle behind a label so that the lines under it do
// not hide it.
func (r *raster) box(x, y, w, h float64) {
	rect := image.Rect(int(x), int(y), int(x+w), int(y+h)).Intersect(r.img.Bounds())
	veil := image.NewUniform(color.RGBA{0xd9, 0xd9, 0xd9, 0xd9}) // white at 85%, premultiplied
	draw.Draw(r.img, rect, veil, image.Point{}, draw.Over)
}

type raster struct {
	img  *image.RGBA
	z    vector.Rasterizer
	clip image.Rectangle
}

// stroke draws a polyline of the given width: each segment is a quad, each
// joint a small square, filled with anti-aliasing.
func (r *raster) stroke(pts [][2]float64, w float64, c color.RGBA) {
	r.strokeAll([][][2]float64{pts}, w, c)
}

// strokeAll draws several polylines in one pass of the rasteriser, over
// their bounding box only.
func (r *raster) strokeAll(lines [][][2]float64, w float64, c color.RGBA) {
	b := r.img.Bounds()
	h := w / 2
	box := image.Rectangle{}
	for _, pts := range lines {
		for _, p := range pts {
			box = box.Union(image.Rect(int(p[0]-h)-2, int(p[1]-h)-2, int(p[0]+h)+3, int(p[1]+h)+3))
		}
	}
	box = box.Intersect(b)
	if !r.clip.Empty() {
		box = box.Intersect(r.clip)
	}
	if box.Empty() {
		return
	}
	r.z.Reset(box.Dx(), box.Dy())
	r.z.DrawOp = draw.Over
	off := [2]float64{float64(box.Min.X), float64(box.Min.Y)}
	for _, pts := range lines {
		r.path(pts, h, off)
	}
	r.z.Draw(r.img, box, image.NewUniform(c), image.Point{})
}

func (r *raster) path(pts [][2]float64, h float64, off [2]float64) {
	for i := 1; i < len(pts); i++ {
		a, e := pts[i-1], pts[i]
		dx, dy := e[0]-a[0], e[1]-a[1]
		n := math.Hypot(dx, dy)
		if n == 0 {
			continue
		}
		nx, ny := -dy/n*h, dx/n*h
		ax, ay, ex, ey := a[0]-off[0], a[1]-off[1], e[0]-off[0], e[1]-off[1]
		r.quad(ax+nx, ay+ny, ex+nx, ey+ny, ex-nx, ey-ny, ax-nx, ay-ny)
		if i < len(pts)-1 {
			q := h * 0.9
			// Same winding as the segment quads, so overlaps add up
			// instead of cancelling.
			r.quad(ex-q, ey-q, ex-q, ey+q, ex+q, ey+q, ex+q, ey-q)
		}
	}
}

func (r *raster) quad(x0, y0, x1, y1, x2, y2, x3, y3 float64) {
	r.z.MoveTo(float32(x0), float32(y0))
	r.z.LineTo(float32(x1), float32(y1))
	r.z.LineTo(float32(x2), float32(y2))
	r.z.LineTo(float32(x3), float32(y3))
	r.z.ClosePath()
}

func (r *raster) dashed(pts [][2]float64, w float64, c color.RGBA, on, off float64) {
	r.strokeAll(dashes(pts, on, off), w, c)
}

// ascii replaces the characters the bitmap font lacks.
var ascii = strings.NewReplacer("×", "x", "÷", "/", "µ", "u", "—", "-", "–", "-", "≈", "~", "→", "->", "≤", "<=", "≥", ">=")

// text draws s with its baseline at (x, y), scaled by an integer factor and
// rotated by 0 or 90 degrees (reading upwards, (x, y) then the start of the
// baseline at the bottom).
func (r *raster) text(s string, x, y float64, c color.RGBA, scale, rotate int) {
	s = ascii.Replace(s)
	face := basicfont.Face7x13
	wpx := font.MeasureString(face, s).Ceil()
	if wpx == 0 {
		return
	}
	mask := image.NewAlpha(image.Rect(0, 0, wpx, 13))
	d := font.Drawer{Dst: mask, Src: image.Opaque, Face: face, Dot: fixed.P(0, 10)}
	d.DrawString(s)
	mb := mask.Bounds()
	for my := 0; my < mb.Dy(); my++ {
		for mx := 0; mx < mb.Dx(); mx++ {
			a := mask.AlphaAt(mx, my).A
			if a == 0 {
				continue
			}
			for sy := 0; sy < scale; sy++ {
				for sx := 0; sx < scale; sx++ {
					px, py := mx*scale+sx, (my-10)*scale+sy
					var dx, dy int
					if rotate == 90 {
						dx, dy = int(x)+py, int(y)-px
					} else {
						dx, dy = int(x)+px, int(y)+py
					}
					if image.Pt(dx, dy).In(r.img.Bounds()) {
						r.img.SetRGBA(dx, dy, c)
					}
				}
			}
		}
	}
}
