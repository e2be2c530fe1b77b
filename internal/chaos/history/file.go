package history

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// WriteFile writes ops to path as JSON lines, one op a line, so a campaign's
// history can be checked again, diffed and grepped after the run. The file
// is written beside path and renamed into place: a reader never sees half a
// history.
func WriteFile(path string, ops []Op) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	enc := json.NewEncoder(w)
	for i := range ops {
		if err = enc.Encode(&ops[i]); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("history: write %s: %w", path, err)
	}
	return nil
}

// ReadFile reads a history WriteFile wrote.
func ReadFile(path string) ([]Op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(f, 1<<16))
	var ops []Op
	for {
		var op Op
		err := dec.Decode(&op)
		if errors.Is(err, io.EOF) {
			return ops, nil
		}
		if err != nil {
			return ops, fmt.Errorf("history: read %s: op %d: %w", path, len(ops)+1, err)
		}
		ops = append(ops, op)
	}
}

// Summary counts a history: operations by kind, outcome and route (which
// gateway, or straight at the store), and how the outcomes clients did not
// learn were settled, so a campaign's report shows what the check was given.
func Summary(ops []Op) string {
	type count struct {
		name string
		n    int
	}
	counter := func() (map[string]int, func() []count) {
		m := map[string]int{}
		return m, func() []count {
			var cs []count
			for k, n := range m {
				cs = append(cs, count{k, n})
			}
			slices.SortFunc(cs, func(a, b count) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.name, b.name)) })
			return cs
		}
	}
	kinds, kindList := counter()
	outcomes, outcomeList := counter()
	routes, routeList := counter()
	settled, settledList := counter()
	keys := map[string]bool{}
	clients := map[int]bool{}
	for i := range ops {
		op := &ops[i]
		keys[op.Key] = true
		clients[op.Client] = true
		kinds[string(op.Kind)]++
		outcomes[string(op.Kind)+" "+string(op.Outcome)]++
		routes[op.Route()]++
		switch {
		case op.Settled != "":
			settled[fmt.Sprintf("%s -> %s", op.Settled, op.Outcome)]++
		case op.Outcome == Unknown:
			settled["unsettled"]++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops on %d keys by %d clients\n", len(ops), len(keys), len(clients))
	line := func(title string, cs []count) {
		b.WriteString(title)
		b.WriteString(":")
		for i, c := range cs {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s %d", c.name, c.n)
		}
		b.WriteString("\n")
	}
	line("by kind", kindList())
	line("by kind and outcome", outcomeList())
	line("by route", routeList())
	if cs := settledList(); len(cs) > 0 {
		b.WriteString("outcomes the clients did not learn, by how they were settled:\n")
		for _, c := range cs {
			fmt.Fprintf(&b, "  %6d  %s\n", c.n, c.name)
		}
	}
	return b.String()
}
