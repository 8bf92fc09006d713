package chart

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// SVG writes the chart as a standalone SVG document.
func (c *Chart) SVG(w io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	L := c.layout()
	b := bufio.NewWriter(w)
	f := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	f(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">`+"\n", L.w, L.h, L.w, L.h)
	f(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	f(`<text x="%.1f" y="%.1f" font-size="20" font-weight="bold" fill="#222">%s</text>`+"\n", L.left, 20+lineH*titleSize-6, xmlEscape(c.Title))
	// Grid and ticks.
	for _, t := range L.yticks {
		y := L.py(t)
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e6e6e6" stroke-width="1"/>`+"\n", L.left, y, L.right, y)
		f(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#333">%s</text>`+"\n", L.left-6, y+4, fmtTick(t, L.yticks))
	}
	for _, t := range L.xticks {
		if t < L.x0-1e-9 || t > L.x1+1e-9 {
			continue
		}
		x := L.px(t)
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e6e6e6" stroke-width="1"/>`+"\n", x, L.top, x, L.bot)
		f(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#333">%s</text>`+"\n", x, L.bot+16, fmtTick(t, L.xticks))
	}
	f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444" stroke-width="1"/>`+"\n", L.left, L.top, L.right-L.left, L.bot-L.top)
	f(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#222">%s</text>`+"\n", (L.left+L.right)/2, L.bot+36, xmlEscape(c.XLabel))
	f(`<text transform="translate(%.1f,%.1f) rotate(-90)" text-anchor="middle" fill="#222">%s</text>`+"\n", 16.0, (L.top+L.bot)/2, xmlEscape(c.YLabel))
	f(`<clipPath id="plot"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"/></clipPath>`+"\n", L.left, L.top, L.right-L.left, L.bot-L.top)
	// Rules under the lines.
	for _, r := range c.HRules {
		y := L.py(r.At)
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="2 3"/>`+"\n", L.left, y, L.right, y, hex(ruleColor(r)))
		if r.Label != "" {
			w := float64(runeLen(r.Label)) * charW
			f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#ffffff" fill-opacity="0.85"/>`+"\n", L.right-8-w, y-18, w+4, 16.0)
			f(`<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", L.right-6, y-5, hex(ruleColor(r)), xmlEscape(r.Label))
		}
	}
	for _, r := range c.VRules {
		x := L.px(r.At)
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5" stroke-dasharray="2 3"/>`+"\n", x, L.top, x, L.bot, hex(ruleColor(r)))
		if r.Label != "" {
			f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#ffffff" fill-opacity="0.85"/>`+"\n", x+2, L.top+2, float64(runeLen(r.Label))*charW+4, 16.0)
			f(`<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x+4, L.top+14, hex(ruleColor(r)), xmlEscape(r.Label))
		}
	}
	f(`<g clip-path="url(#plot)" fill="none" stroke-linejoin="round">` + "\n")
	for _, l := range c.Lines {
		pts := L.points(l)
		if len(pts) == 0 {
			continue
		}
		var sb strings.Builder
		for i, p := range pts {
			if i > 0 {
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "%.1f,%.1f", p[0], p[1])
		}
		dash := ""
		if l.Dashed {
			dash = ` stroke-dasharray="8 5"`
		}
		f(`<polyline stroke="%s" stroke-width="%.1f"%s points="%s"/>`+"\n", hex(l.Color), width(l), dash, sb.String())
	}
	f("</g>\n")
	// Legend.
	for i, l := range c.Lines {
		y := L.top + 10 + float64(i)*lineH*1.25
		dash := ""
		if l.Dashed {
			dash = ` stroke-dasharray="8 5"`
		}
		f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"%s/>`+"\n", L.legendX, y, L.legendX+30, y, hex(l.Color), width(l), dash)
		f(`<text x="%.1f" y="%.1f" fill="#222">%s</text>`+"\n", L.legendX+36, y+4, xmlEscape(l.Name))
	}
	f("</svg>\n")
	return b.Flush()
}
