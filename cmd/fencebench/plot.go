package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	plotTargets = []string{"direct", "fencegate", "versitygw"}
	targetStyle = map[string]struct {
		color color.RGBA
		shape draw.GlyphDrawer
	}{
		"direct":    {color.RGBA{31, 119, 180, 255}, draw.CircleGlyph{}}, // blue
		"fencegate": {color.RGBA{255, 127, 14, 255}, draw.BoxGlyph{}},    // orange
		"versitygw": {color.RGBA{44, 160, 44, 255}, draw.PyramidGlyph{}}, // green
	}
	// plotSizes are the object sizes the benchmark measures, the x axis' ticks.
	plotSizes = []int64{4 << 10, 64 << 10, 1 << 20, 64 << 20, 256 << 20}
)

const (
	plotW, plotH = 12 * vg.Inch, 9.5 * vg.Inch
	plotDPI      = 100 // 1200 x 950 pixels
	headerH      = 0.75 * vg.Inch
)

// writePlots draws the throughput figure as pngPath and, beside it, as the
// same name ending in .svg.
func writePlots(pngPath string, recs []Record) error {
	img := vgimg.NewWith(vgimg.UseWH(plotW, plotH), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	drawFigure(draw.New(img), recs)
	if err := writeTo(pngPath, vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	svg := vgsvg.New(plotW, plotH)
	drawFigure(draw.New(svg), recs)
	return writeTo(strings.TrimSuffix(pngPath, ".png")+".svg", svg)
}

func writeTo(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// drawFigure draws MiB/s against object size: GET left, PUT right, one client
// on top, the high concurrency below, every panel on the same y range so they
// compare at a glance.
func drawFigure(dc draw.Canvas, recs []Record) {
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

	top := dc.Max.Y
	title := textStyle(16, draw.XCenter, draw.YTop)
	mid := (dc.Min.X + dc.Max.X) / 2
	dc.FillText(title, vg.Point{X: mid, Y: top - 10}, "fencegate benchmark: throughput against object size")
	note := textStyle(11, draw.XCenter, draw.YTop)
	note.Color = color.Gray{90}
	dc.FillText(note, vg.Point{X: mid, Y: top - 34}, "median MiB/s of the rounds, whiskers from min to max; both axes log scale; in the PUT panels the 256 MiB point is the multipart upload (4 x 64 MiB)")

	body := draw.Crop(dc, 0, 0, 0, -headerH)
	grid := [][]*plot.Plot{
		{panel(recs, opGET, false, yLo, yHi), panel(recs, opPUT, false, yLo, yHi)},
		{panel(recs, opGET, true, yLo, yHi), panel(recs, opPUT, true, yLo, yHi)},
	}
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: 0.35 * vg.Inch, PadY: 0.3 * vg.Inch, PadLeft: 0.15 * vg.Inch, PadRight: 0.25 * vg.Inch, PadBottom: 0.1 * vg.Inch}
	canvases := plot.Align(grid, tiles, body)
	for i, row := range grid {
		for j, p := range row {
			p.Draw(canvases[i][j])
		}
	}
}

func textStyle(size vg.Length, x draw.XAlignment, y draw.YAlignment) text.Style {
	return text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, size), XAlign: x, YAlign: y, Handler: plot.DefaultTextHandler}
}

// panel is one plot of the figure: op's cells at one client (high false) or
// more. Targets are nudged apart on x so equal values do not hide each other.
func panel(recs []Record, op string, high bool, yLo, yHi float64) *plot.Plot {
	p := plot.New()
	p.Title.Text = panelLabel(recs, op, high)
	p.Title.TextStyle.Font.Size = 14
	p.X.Label.Text = "object size"
	p.Y.Label.Text = "MiB/s"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = sizeTicks{}, decadeTicks{}
	p.X.Min, p.X.Max = math.Exp2(11.5), math.Exp2(28.8)
	p.Y.Min, p.Y.Max = math.Pow(10, yLo), math.Pow(10, yHi)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = 12
		a.Tick.Label.Font.Size = 11
	}
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = color.Gray{215}, color.Gray{215}
	p.Add(g)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = 12
	p.Legend.XOffs, p.Legend.YOffs = 8, -6

	for ti, t := range plotTargets {
		st := targetStyle[t]
		nudge := math.Exp2(float64(ti-1) * 0.12)
		var pts whiskered
		for _, c := range cells(recs) {
			if !inPanel(c, op, high) {
				continue
			}
			r := findRec(recs, t, c)
			if r == nil || r.MiBPerS <= 0 {
				continue
			}
			lo, hi := r.MiBPerS, r.MiBPerS
			if r.MiBPerSMin > 0 {
				lo, hi = r.MiBPerSMin, r.MiBPerSMax
			}
			pts = append(pts, whisker{x: float64(c.size) * nudge, y: r.MiBPerS, lo: lo, hi: hi})
		}
		if len(pts) == 0 {
			continue
		}
		line, scatter, err := plotter.NewLinePoints(pts)
		if err != nil {
			continue // NaN or infinite values: nothing sensible to draw
		}
		line.Color, line.Width = st.color, 2
		scatter.Color, scatter.Shape, scatter.Radius = st.color, st.shape, 4
		bars, err := plotter.NewYErrorBars(pts)
		if err == nil {
			bars.Color, bars.Width, bars.CapWidth = st.color, 1.5, 6
			p.Add(bars)
		}
		p.Add(line, scatter)
		p.Legend.Add(t, line, scatter)
	}
	return p
}

// whisker is a median with the min and max of the rounds around it.
type whisker struct{ x, y, lo, hi float64 }

type whiskered []whisker

func (w whiskered) Len() int                    { return len(w) }
func (w whiskered) XY(i int) (float64, float64) { return w[i].x, w[i].y }
func (w whiskered) YError(i int) (float64, float64) {
	return w[i].y - w[i].lo, w[i].hi - w[i].y
}

// sizeTicks labels the measured object sizes.
type sizeTicks struct{}

func (sizeTicks) Ticks(_, _ float64) []plot.Tick {
	var ts []plot.Tick
	for _, s := range plotSizes {
		ts = append(ts, plot.Tick{Value: float64(s), Label: strings.ReplaceAll(sizeLabel(s), " ", "\u00a0")})
	}
	return ts
}

// decadeTicks labels each power of ten and marks 2..9 times it.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for d := math.Floor(math.Log10(lo)); d <= math.Ceil(math.Log10(hi)); d++ {
		v := math.Pow(10, d)
		ts = append(ts, plot.Tick{Value: v, Label: decadeLabel(v)})
		for m := 2.0; m < 10; m++ {
			if m*v <= hi {
				ts = append(ts, plot.Tick{Value: m * v})
			}
		}
	}
	return ts
}

func decadeLabel(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(fmt.Sprintf("%.4f", v), "0")
}

// inPanel reports whether cell c is drawn in the panel for op (PUT includes
// multipart) at one client (high false) or more.
func inPanel(c cell, op string, high bool) bool {
	return (c.op == op || op == opPUT && c.op == opMultipart) && (c.conc > 1) == high
}

// panelLabel names a panel after the concurrencies its cells ran at.
func panelLabel(recs []Record, op string, high bool) string {
	var concs []string
	first := 0
	for _, c := range cells(recs) {
		if !inPanel(c, op, high) {
			continue
		}
		if first == 0 {
			first = c.conc
		} else if c.conc != first {
			concs = append(concs, fmt.Sprintf("%d at %s", c.conc, sizeLabel(c.size)))
		}
	}
	if first == 0 {
		return op + ": not measured"
	}
	label := fmt.Sprintf("%s, %d client", op, first)
	if first > 1 {
		label += "s"
	}
	if len(concs) > 0 {
		label += " (" + strings.Join(concs, ", ") + ")"
	}
	return label
}
