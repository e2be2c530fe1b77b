package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"
)

// The store's part of the gap between the floor and fencegate's one-client
// PUT. The floor counts the store's plain PUT, sent back to back. fencegate
// sends the store another request: fenced with If-Match on the key's ETag,
// its attempt's id as metadata, the body's CRC32 in x-amz-checksum-crc32; and
// sends it after the acquire's transaction, the store idle meanwhile. In
// every round, beside the floor, the run times that request straight at the
// store at one client (target storeTarget): back to back (opPUTFenced), and
// each after a pause of the round's two-transaction p50 (opPUTFencedIdle).
const (
	// attemptHeader is the metadata header fencegate names a write's attempt
	// in (its store package's AttemptHeader; the benchmark stands outside the
	// rooms and says it on the wire, as a client would).
	attemptHeader   = "x-amz-meta-fencegate-attempt"
	storeTarget     = "store"
	opPUTFenced     = "PUTFENCED"
	opPUTFencedIdle = "PUTFENCEDIDLE"
)

// fencedCells are the store's fenced PUTs measured for the floor's sizes
// whose one-client PUT cell runs.
func fencedCells(cs []cell) []cell {
	var out []cell
	for _, size := range floorSizes {
		if slices.Contains(cs, cell{opPUT, size, 1}) {
			out = append(out, cell{opPUTFenced, size, 1}, cell{opPUTFencedIdle, size, 1})
		}
	}
	return out
}

// runFencedPUT PUTs one key of c.size bytes straight at the store t in the
// form fencegate sends it, one after another for about dur, each after pause
// when c is opPUTFencedIdle. Only the latencies mean anything (the pauses are
// in elapsed); cpu is the store's.
func runFencedPUT(ctx context.Context, t target, pg procGroups, c cell, pause, dur time.Duration, payload []byte) sample {
	var s sample
	cl := newS3c(t)
	data := payload[:c.size]
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(data))
	hdr := map[string]string{"x-amz-checksum-crc32": base64.StdEncoding.EncodeToString(sum[:])}
	path := fmt.Sprintf("/%s/fenced/%d", bucket, c.size)
	buf := make([]byte, 64<<10)
	put := func() (string, error) {
		resp, _, _, err := cl.doWith(ctx, "PUT", path, "", hdr, bytes.NewReader(data), c.size, buf, false)
		if err != nil {
			return "", err
		}
		return resp.Header.Get("ETag"), nil
	}
	// The key's first version: every timed PUT is fenced on an ETag.
	etag, err := put()
	if err != nil {
		s.fail(err)
		return s
	}
	if c.op != opPUTFencedIdle {
		pause = 0
	}
	var lats []time.Duration
	store0, client0 := groupCPU(pg.store), selfCPU()
	start := time.Now()
	for n := 0; n == 0 || time.Since(start) < dur; n++ {
		if ctx.Err() != nil {
			break
		}
		time.Sleep(pause)
		hdr["If-Match"], hdr[attemptHeader] = etag, rand.Text()
		t0 := time.Now()
		next, err := put()
		if err != nil {
			s.fail(err)
			continue
		}
		lats = append(lats, time.Since(t0))
		etag = next
		s.ops++
	}
	s.elapsed = time.Since(start)
	s.storeCPU = groupCPU(pg.store) - store0
	s.cpu = s.storeCPU
	s.client = selfCPU() - client0
	s.setLatencies(lats)
	return s
}
