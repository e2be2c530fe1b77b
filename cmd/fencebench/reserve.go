package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate/gateway/reservations"
)

// The upload-reservation cells (issue 31, docs/RESERVATIONS.md): each
// operation reserves a key through the reservation API (with a quota
// account, as an application does) and PUTs 64 KiB to the presigned URL the
// reservation answers, whose commit commits the reservation (the issue's
// cell: reserve + PUT + commit); the second cell also calls the API's
// complete, as an application that confirms does. They run through
// fencegate only, beside the plain PUT 64 KiB c=32 of the same run; the
// issue's target is that the reservation costs less than one more database
// round trip per upload.
const (
	opReserve         = "RESERVE"
	opReserveComplete = "RESERVE+COMPLETE"
	benchAccount      = "fencebench"
)

var (
	reserveCell         = cell{opReserve, 64 << 10, 32}
	reserveCompleteCell = cell{opReserveComplete, 64 << 10, 32}
	reserveCells        = []cell{reserveCell, reserveCompleteCell}
)

func isReserve(c cell) bool { return c.op == opReserve || c.op == opReserveComplete }

// reservePut is one reserve + PUT of key, and its complete when complete is
// set. Without it, the PUT's 200 with its generation says the commit
// committed the reservation (the commit trigger does both in one
// transaction, or neither).
func (c *s3c) reservePut(ctx context.Context, key string, data []byte, buf []byte, complete bool) error {
	api := reservations.Client{Endpoint: c.URL, AccessKey: c.AccessKey, SecretKey: c.SecretKey, Region: c.Region, HTTP: httpClient}
	size := int64(len(data))
	res, err := api.Create(ctx, reservations.CreateRequest{Bucket: bucket, Key: key, Size: &size, Account: benchAccount})
	if err != nil {
		return fmt.Errorf("create reservation: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, res.PutURL, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.ContentLength = size
	for h, v := range res.PutHeaders {
		req.Header.Set(h, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	var answer strings.Builder
	for {
		n, rerr := resp.Body.Read(buf)
		if resp.StatusCode >= 300 && answer.Len() < 4096 {
			answer.Write(buf[:n])
		}
		if rerr != nil {
			resp.Body.Close()
			if rerr != io.EOF {
				return rerr
			}
			break
		}
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("PUT under reservation %s: %s: %.300s", res.ID, resp.Status, answer.String())
	}
	if !complete {
		if resp.Header.Get("x-fencegate-generation") == "" {
			return fmt.Errorf("PUT under reservation %s: %s without a generation", res.ID, resp.Status)
		}
		return nil
	}
	done, err := api.Complete(ctx, res.ID)
	if err != nil {
		return fmt.Errorf("complete %s: %w", res.ID, err)
	}
	if done.State != reservations.Committed {
		return fmt.Errorf("complete %s: state %s", res.ID, done.State)
	}
	return nil
}

// reserveRows compares each reservation cell with the plain PUT 64 KiB c=32
// through fencegate in the same run: throughput ratio (round-paired), p50,
// PostgreSQL write transactions and CPU per upload; a row per cell the run
// has, none without the plain PUT.
func reserveRows(recs []Record) [][]string {
	var rows [][]string
	for _, c := range reserveCells {
		if row, ok := reserveRow(recs, c); ok {
			rows = append(rows, row)
		}
	}
	return rows
}

func reserveRow(recs []Record, c cell) ([]string, bool) {
	r, p := findRec(recs, "fencegate", c), findRec(recs, "fencegate", smallPUT)
	if r == nil || p == nil {
		return nil, false
	}
	ratio := "-"
	if len(r.MiBPerSRounds) == len(p.MiBPerSRounds) && len(r.MiBPerSRounds) > 0 {
		var v []float64
		for i := range r.MiBPerSRounds {
			if p.MiBPerSRounds[i] == 0 {
				v = nil
				break
			}
			v = append(v, r.MiBPerSRounds[i]/p.MiBPerSRounds[i])
		}
		if len(v) > 0 {
			ratio = summarize(v).String() + "x"
		}
	}
	return []string{
		cellLabel(c), ratio,
		num(r.OpsPerS) + " / " + num(p.OpsPerS),
		num(r.P50Ms) + " / " + num(p.P50Ms),
		num(r.DBWriteTxnsPerOp) + " / " + num(p.DBWriteTxnsPerOp) + " (+" + num(r.DBWriteTxnsPerOp-p.DBWriteTxnsPerOp) + ")",
		num(r.DBCPUSPerOp*1000) + " / " + num(p.DBCPUSPerOp*1000),
		num(r.CPUSPerOp*1000) + " / " + num(p.CPUSPerOp*1000),
	}, true
}

var reserveHeader = []string{"cell", "reserve / plain PUT (ops/s, round-paired)", "ops/s", "p50 ms", "PostgreSQL write txns/op", "PostgreSQL CPU ms/op", "fencegate CPU ms/op"}

// reserveIntro says what the reservation table is, for the docs and the terminal.
const reserveIntro = "Upload reservations (issue 31): reserve + PUT 64 KiB under the presigned URL (its commit commits the reservation), and the same with the API's complete after it, against the plain PUT 64 KiB c=32 through fencegate in the same run (each figure reservation / plain PUT, medians); the target: the reservation costs less than one more database round trip per upload"
