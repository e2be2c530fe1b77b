package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/fencegate/fencegate/lease"
	"github.com/fencegate/fencegate/store"
)

const auditUsage = `usage: fencegate audit [flags] BUCKET

Compares what BUCKET holds at the store with the catalog and reports each
divergence: objects without a catalog entry (unrecorded), entries without an
object (missing), entries whose ETag or size differ (differs), bytes whose
attempt metadata names an attempt the catalog has unresolved or does not know
(unknown_attempt), multipart uploads in progress that fencegate did not
create (foreign_upload), and multipart uploads no attempt names yet that a
CreateMultipartUpload through fencegate whose upload id was not recorded (its
answer lost, or the database unreachable) may have made (unbound_upload: the
reconciler binds each to its attempt). Read-only unless --repair, which records each key's
divergence through the settle path under the key's lease (external, adopted
or delete generations; bytes are never deleted). Exit status 3 when
divergence remains (found, and not repaired).
`

func cmdAudit(ctx context.Context, args []string) error {
	var cfg serveConfig
	f := newFlags("audit", auditUsage)
	var prefix string
	var repair, asJSON bool
	f.StringVar(&prefix, "prefix", "", "audit only keys under this prefix")
	f.BoolVar(&repair, "repair", false, "record each divergent key through the settle path (never deletes bytes)")
	f.BoolVar(&asJSON, "json", false, "print the findings as JSON")
	f.database(&cfg.DatabaseURL)
	f.store(&cfg.Store)
	cfg.defineLease(f)
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() != 1 {
		return errors.New("name one bucket: fencegate audit [flags] BUCKET (-h lists the flags)")
	}
	bucket := f.Arg(0)
	if err := cfg.validateLease(); err != nil {
		return err
	}
	tool, err := openTool(ctx, cfg, 4, "fencegate audit")
	if err != nil {
		return err
	}
	defer tool.close()
	st, leases, catalog := tool.store, tool.leases, tool.catalog
	ls := st
	aud := lease.Auditor{DB: catalog, Store: ls, DBTimeout: cfg.Lease.DBTimeout}
	var findings []lease.Finding
	marker, after := "", ""
	for {
		fs, next, last, err := aud.AuditPage(ctx, bucket, prefix, marker, after, 1000)
		if err != nil {
			return err
		}
		findings = append(findings, fs...)
		if next == "" {
			break
		}
		marker, after = next, last
	}
	km, um := "", ""
	for {
		foreign, unbound, p, err := aud.ForeignUploads(ctx, bucket, km, um, 1000)
		if err != nil {
			return err
		}
		for _, k := range []struct {
			kind string
			ups  []store.Upload
		}{{lease.ForeignUpload, foreign}, {lease.UnboundUpload, unbound}} {
			for _, u := range k.ups {
				if strings.HasPrefix(u.Key, prefix) {
					findings = append(findings, lease.Finding{Kind: k.kind, Bucket: bucket, Key: u.Key, UploadID: u.UploadID})
				}
			}
		}
		if p.NextKey == "" {
			break
		}
		km, um = p.NextKey, p.NextUploadID
	}
	remaining := len(findings)
	repaired := map[int]string{}
	if repair {
		for i, fd := range findings {
			switch fd.Kind {
			case lease.ForeignUpload:
				repaired[i] = "not repaired: an upload is aborted only by the reconciler's --foreign-uploads=abort policy"
				continue
			case lease.UnboundUpload:
				repaired[i] = "not repaired: the reconciler binds it to its attempt (--upload-create-settle after the Create)"
				continue
			}
			if err := leases.SettleKey(ctx, fd.Bucket, fd.Key, ls, true); err != nil {
				repaired[i] = "repair failed: " + err.Error()
				continue
			}
			repaired[i] = "repaired"
			remaining--
		}
	}
	if asJSON {
		type row struct {
			lease.Finding
			Repair string `json:"repair,omitempty"`
		}
		out := []row{}
		for i, fd := range findings {
			out = append(out, row{fd, repaired[i]})
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "KIND\tKEY\tSTORE\tCATALOG\tATTEMPT/UPLOAD\tREPAIR")
		for i, fd := range findings {
			storeCol, catCol := "-", "-"
			if fd.StoreETag != "" {
				storeCol = fmt.Sprintf("%s/%d", fd.StoreETag, fd.StoreSize)
			}
			if fd.CatalogETag != "" {
				catCol = fmt.Sprintf("%s/%d", fd.CatalogETag, fd.CatalogSize)
			}
			ref := fd.AttemptID + fd.UploadID
			if ref == "" {
				ref = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", fd.Kind, shown(fd.Key), storeCol, catCol, ref, orDash(repaired[i]))
		}
		w.Flush()
		fmt.Printf("%d divergences in %s", len(findings), bucket)
		if repair {
			fmt.Printf(", %d repaired", len(findings)-remaining)
		}
		fmt.Println()
	}
	if remaining > 0 {
		return exitCode(3)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
