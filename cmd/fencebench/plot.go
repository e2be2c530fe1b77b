package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
)

var (
	black     = color.RGBA{0, 0, 0, 255}
	grid      = color.RGBA{225, 225, 225, 255}
	axisGrey  = color.RGBA{90, 90, 90, 255}
	targetRGB = map[string]color.RGBA{
		"direct":    {31, 119, 180, 255}, // blue
		"fencegate": {255, 127, 14, 255}, // orange
		"versitygw": {44, 160, 44, 255},  // green
	}
	plotTargets = []string{"direct", "fencegate", "versitygw"}
)

const (
	plotW, plotH = 1200, 900
	fontScale    = 2
)

type canvas struct{ *image.RGBA }

func (c canvas) dot(x, y, r int, col color.RGBA) {
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			c.SetRGBA(x+dx, y+dy, col)
		}
	}
}

// line draws a segment of thickness 2r+1 (Bresenham, stamped).
func (c canvas) line(x0, y0, x1, y1, r int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		c.dot(x0, y0, r, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// text draws s in the built-in 5x7 font (upper case) with its top-left at x, y.
func (c canvas) text(x, y int, s string, col color.RGBA) {
	for _, ch := range strings.ToUpper(s) {
		g, ok := glyphs[ch]
		if !ok {
			g = glyphs['?']
		}
		for row, bits := range g {
			for colIdx := 0; colIdx < 5; colIdx++ {
				if bits&(0x10>>colIdx) != 0 {
					for a := 0; a < fontScale; a++ {
						for b := 0; b < fontScale; b++ {
							c.SetRGBA(x+colIdx*fontScale+a, y+row*fontScale+b, col)
						}
					}
				}
			}
		}
		x += 6 * fontScale
	}
}

func textWidth(s string) int { return len(s) * 6 * fontScale }

// writePlot draws MiB/s against object size: GET left, PUT right, one client on
// top, the high concurrency below.
func writePlot(path string, recs []Record) error {
	img := canvas{image.NewRGBA(image.Rect(0, 0, plotW, plotH))}
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range recs {
		if !isStream(r) && r.MiBPerSMin > 0 {
			lo, hi = math.Min(lo, r.MiBPerSMin), math.Max(hi, r.MiBPerSMax)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 1000
	}
	yLo, yHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if yHi <= yLo {
		yHi = yLo + 1
	}

	title := "FENCEGATE BENCHMARK: THROUGHPUT (MIB/S, LOG) AGAINST OBJECT SIZE"
	img.text((plotW-textWidth(title))/2, 12, title, black)
	note := "PUT PANELS: THE 256M POINT IS THE MULTIPART UPLOAD (4 X 64M). WHISKERS: MIN-MAX OVER ROUNDS"
	img.text((plotW-textWidth(note))/2, 66, note, axisGrey)
	lx := 330
	for _, t := range plotTargets {
		img.dot(lx+8, 42, 7, targetRGB[t])
		img.text(lx+24, 36, t, black)
		lx += 220
	}
	for i, op := range []string{opGET, opPUT, opGET, opPUT} {
		x0, y0 := 20+(i%2)*590, 90+(i/2)*405
		drawPanel(img, recs, x0, y0, 570, 390, op, i >= 2, yLo, yHi)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// inPanel reports whether cell c is drawn in the panel for op (PUT includes
// multipart) at one client (high false) or more.
func inPanel(c cell, op string, high bool) bool {
	return (c.op == op || op == opPUT && c.op == opMultipart) && (c.conc > 1) == high
}

// panelLabel names a panel after the concurrencies its cells ran at.
func panelLabel(recs []Record, op string, high bool) string {
	label := op
	var concs []string
	first := 0
	for _, c := range cells(recs) {
		if !inPanel(c, op, high) {
			continue
		}
		if first == 0 {
			first = c.conc
		} else if c.conc != first {
			concs = append(concs, fmt.Sprintf("%d AT %s", c.conc, strings.ReplaceAll(strings.ReplaceAll(sizeLabel(c.size), "iB", ""), " ", "")))
		}
	}
	if first == 0 {
		return label + ": NOT MEASURED"
	}
	label += fmt.Sprintf(", %d CLIENT", first)
	if first > 1 {
		label += "S"
	}
	if len(concs) > 0 {
		label += " (" + strings.Join(concs, ", ") + ")"
	}
	return label
}

func drawPanel(img canvas, recs []Record, x0, y0, w, h int, op string, high bool, yLo, yHi float64) {
	left, right, top, bottom := x0+80, x0+w-20, y0+30, y0+h-50
	label := panelLabel(recs, op, high)
	img.text(left+(right-left-textWidth(label))/2, y0+4, label, black)
	// x: log2(size) from 4 KiB (12) to 256 MiB (28), padded.
	xLo, xHi := 11.5, 28.5
	px := func(size int64) int {
		return left + int(float64(right-left)*(math.Log2(float64(size))-xLo)/(xHi-xLo))
	}
	py := func(v float64) int {
		return bottom - int(float64(bottom-top)*(math.Log10(v)-yLo)/(yHi-yLo))
	}
	for d := yLo; d <= yHi; d++ {
		y := py(math.Pow(10, d))
		img.line(left, y, right, y, 0, grid)
		l := decadeLabel(d)
		img.text(left-10-textWidth(l), y-7, l, axisGrey)
	}
	for _, s := range []int64{4 << 10, 64 << 10, 1 << 20, 64 << 20, 256 << 20} {
		x := px(s)
		img.line(x, top, x, bottom, 0, grid)
		l := strings.ReplaceAll(strings.ReplaceAll(sizeLabel(s), "iB", ""), " ", "")
		img.text(x-textWidth(l)/2, bottom+8, l, axisGrey)
	}
	img.line(left, top, left, bottom, 0, axisGrey)
	img.line(left, bottom, right, bottom, 0, axisGrey)
	img.text(left+(right-left-textWidth("OBJECT SIZE"))/2, bottom+30, "OBJECT SIZE", axisGrey)
	img.text(x0+2, y0+4, "MIB/S", axisGrey)

	for ti, t := range plotTargets {
		col := targetRGB[t]
		off := (ti - 1) * 6
		var pts [][2]int
		for _, c := range cells(recs) {
			if !inPanel(c, op, high) {
				continue
			}
			r := findRec(recs, t, c)
			if r == nil || r.MiBPerS <= 0 {
				continue
			}
			x := px(c.size) + off
			pts = append(pts, [2]int{x, py(r.MiBPerS)})
			if r.MiBPerSMin > 0 {
				img.line(x, py(r.MiBPerSMin), x, py(r.MiBPerSMax), 0, col)
			}
		}
		for i := 1; i < len(pts); i++ {
			img.line(pts[i-1][0], pts[i-1][1], pts[i][0], pts[i][1], 1, col)
		}
		for _, p := range pts {
			img.dot(p[0], p[1], 4, col)
		}
	}
}

func decadeLabel(d float64) string {
	v := math.Pow(10, d)
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.4f", v), "0")
}

// glyphs is a 5x7 bitmap font: seven rows of five bits, most significant left.
var glyphs = map[rune][7]byte{
	'A': {0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}, 'B': {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E},
	'C': {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}, 'D': {0x1E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1E},
	'E': {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}, 'F': {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10},
	'G': {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}, 'H': {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11},
	'I': {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}, 'J': {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C},
	'K': {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}, 'L': {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F},
	'M': {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}, 'N': {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},
	'O': {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, 'P': {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10},
	'Q': {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}, 'R': {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11},
	'S': {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}, 'T': {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},
	'U': {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}, 'V': {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04},
	'W': {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}, 'X': {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11},
	'Y': {0x11, 0x11, 0x0A, 0x04, 0x04, 0x04, 0x04}, 'Z': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F},
	'0': {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}, '1': {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E},
	'2': {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}, '3': {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E},
	'4': {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}, '5': {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E},
	'6': {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}, '7': {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},
	'8': {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}, '9': {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C},
	' ': {}, '.': {0, 0, 0, 0, 0, 0x0C, 0x0C}, ',': {0, 0, 0, 0, 0x0C, 0x04, 0x08},
	'-': {0, 0, 0, 0x1F, 0, 0, 0}, '/': {0, 0x01, 0x02, 0x04, 0x08, 0x10, 0},
	'(': {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}, ')': {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},
	'=': {0, 0, 0x1F, 0, 0x1F, 0, 0}, ':': {0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0},
	'?': {0x0E, 0x11, 0x01, 0x02, 0x04, 0, 0x04},
}
