package chaos

import (
	"image/color"
	"io"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/fencegate/fencegate/internal/chaos/history"
)

// WriteChart draws the campaign over time: operations per second by outcome
// (above) and each fault as a bar from its start to its end on its kind's row
// (below). pngPath gets a PNG and the same name ending .svg an SVG.
func (r *Report) WriteChart(pngPath string) error {
	const w, h = 12 * vg.Inch, 8 * vg.Inch
	draws := func(c draw.Canvas) error {
		top, bottom, err := r.chartPlots()
		if err != nil {
			return err
		}
		tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: 0.2 * vg.Inch, PadTop: 0.1 * vg.Inch, PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.2 * vg.Inch}
		cs := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, c)
		top.Draw(cs[0][0])
		bottom.Draw(cs[1][0])
		return nil
	}
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(100), vgimg.UseBackgroundColor(color.White))
	if err := draws(draw.New(img)); err != nil {
		return err
	}
	if err := writeFile(pngPath, vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	svg := vgsvg.New(w, h)
	if err := draws(draw.New(svg)); err != nil {
		return err
	}
	return writeFile(strings.TrimSuffix(pngPath, ".png")+".svg", svg)
}

func writeFile(path string, wt io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (r *Report) chartPlots() (*plot.Plot, *plot.Plot, error) {
	const bin = 5.0 // seconds
	var end float64
	for _, o := range r.history {
		if t := float64(o.Return) / 1e9; t > end {
			end = t
		}
	}
	n := int(end/bin) + 1
	series := []struct {
		name    string
		match   func(history.Op) bool
		color   color.RGBA
		counted []float64
	}{
		{"acknowledged or answered", func(o history.Op) bool { return o.Outcome == history.OK || o.Outcome == history.Absent }, color.RGBA{31, 119, 180, 255}, nil},
		{"refused (412, 409, 503 SlowDown, 4xx)", func(o history.Op) bool {
			return o.Outcome == history.Failed || o.Outcome == history.PreconditionFailed
		}, color.RGBA{44, 160, 44, 255}, nil},
		{"outcome unknown to the client", func(o history.Op) bool { return o.Outcome == history.Unknown }, color.RGBA{214, 39, 40, 255}, nil},
	}
	top := plot.New()
	top.Title.Text = "chaos campaign: operations per second (5 s bins) and faults"
	top.Y.Label.Text = "operations / s"
	top.X.Label.Text = "seconds since the start"
	top.Legend.Top = true
	for i := range series {
		series[i].counted = make([]float64, n)
	}
	for _, o := range r.history {
		b := int(float64(o.Invoke) / 1e9 / bin)
		for i := range series {
			if series[i].match(o) {
				series[i].counted[b]++
			}
		}
	}
	for _, s := range series {
		pts := make(plotter.XYs, n)
		for i := range pts {
			pts[i].X, pts[i].Y = float64(i)*bin+bin/2, s.counted[i]/bin
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, nil, err
		}
		l.Color = s.color
		l.Width = vg.Points(1.5)
		top.Add(l)
		top.Legend.Add(s.name, l)
	}
	top.Add(plotter.NewGrid())

	bottom := plot.New()
	bottom.X.Label.Text = "seconds since the start"
	bottom.X.Min, bottom.X.Max = 0, end
	top.X.Min, top.X.Max = 0, end
	rows := map[string]int{}
	var names []string
	for i, k := range AllFaults {
		rows[k] = i
		names = append(names, k)
	}
	var ticks []plot.Tick
	for i, k := range names {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: k})
	}
	bottom.Y.Tick.Marker = plot.ConstantTicks(ticks)
	bottom.Y.Min, bottom.Y.Max = -0.7, float64(len(names))-0.3
	for _, f := range r.Faults {
		y := float64(rows[f.Kind])
		x0, x1 := float64(f.Start)/1e9, float64(f.End)/1e9
		if x1-x0 < end/400 {
			x1 = x0 + end/400 // an instant fault still shows
		}
		l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
		if err != nil {
			return nil, nil, err
		}
		l.Width = vg.Points(6)
		l.Color = color.RGBA{90, 90, 90, 255}
		if f.Err != "" {
			l.Color = color.RGBA{214, 39, 40, 255}
		}
		bottom.Add(l)
	}
	bottom.Add(plotter.NewGrid())
	return top, bottom, nil
}
