// Package chart draws line charts as SVG and as PNG from one model, with
// only the standard library and golang.org/x/image (an anti-aliasing
// rasteriser and a bitmap font). It is the drawing half of the simulator's
// report and knows nothing of rate limits: a Chart is axes with labels and
// units, a legend, lines (solid or dashed) and reference lines.
//
// Both renderers are deterministic: the same Chart gives the same bytes.
package chart
