// Command uploads is a small upload service on fencegate's reservations
// (docs/RESERVATIONS.md): it reserves a key for each upload a client asks
// for, hands the client the presigned PUT URL (the bytes go to fencegate,
// never through this service), and reacts when the upload commits by
// polling the reservation.
//
//	source .fencegate/env
//	fencegate keys grant "$AWS_ACCESS_KEY_ID" reserve:photos   # or any write/admin grant
//	go run ./examples/uploads -bucket photos &
//	curl -s -X POST 'localhost:8090/uploads?name=cat.jpg&size=5' # {"id":...,"put_url":...}
//	curl -T cat.jpg "<put_url>"                                  # the log says: committed
//
// With a checksum the URL pins it (the client must send the header given in
// put_headers, and the bytes must match it):
//
//	# CRC32C: the base64 of the bytes' big-endian CRC32C, as x-amz-checksum-crc32c
//	curl -s -X POST -G localhost:8090/uploads -d name=cat.jpg -d size=5 --data-urlencode "crc32c=$CRC32C"
//	curl -T cat.jpg -H "x-amz-checksum-crc32c: $CRC32C" "<put_url>"
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate/gateway/reservations"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to serve on")
	bucket := flag.String("bucket", "photos", "bucket the uploads go to")
	account := flag.String("account", "", "quota account the uploads count against")
	flag.Parse()
	c := &reservations.Client{Endpoint: os.Getenv("FENCEGATE_ENDPOINT"),
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}
	svc := &service{c: c, bucket: *bucket, account: *account, pending: map[string]bool{}}
	go svc.watch(context.Background())
	http.HandleFunc("POST /uploads", svc.reserve)
	log.Printf("serving on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, nil))
}

type service struct {
	c               *reservations.Client
	bucket, account string
	mu              sync.Mutex
	pending         map[string]bool
}

// reserve answers POST /uploads?name=N&size=S[&sha256=|&crc32c=|&crc64nvme=]
// with the reservation's id, key, the URL the client PUTs the bytes to and
// the headers it must send (the checksum's, when one is given).
func (s *service) reserve(w http.ResponseWriter, r *http.Request) {
	size, err := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
	if err != nil || size < 0 {
		http.Error(w, "size: want the upload's size in bytes", http.StatusBadRequest)
		return
	}
	res, err := s.c.Create(r.Context(), reservations.CreateRequest{Bucket: s.bucket, Prefix: "uploads/",
		Size: &size, Account: s.account, Expires: "15m", SHA256: r.URL.Query().Get("sha256"),
		CRC32C: r.URL.Query().Get("crc32c"), CRC64NVME: r.URL.Query().Get("crc64nvme"),
		Metadata: json.RawMessage(strconv.Quote(r.URL.Query().Get("name")))})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	s.mu.Lock()
	s.pending[res.ID] = true
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": res.ID, "key": res.Key, "put_url": res.PutURL,
		"put_headers": res.PutHeaders, "expires_at": res.ExpiresAt})
}

// watch polls the pending reservations and reacts to each once it leaves
// reserved: committed (the object is there, with its verified size and
// ETag), or expired/cancelled (nothing was published).
func (s *service) watch(ctx context.Context) {
	for range time.Tick(time.Second) {
		s.mu.Lock()
		ids := make([]string, 0, len(s.pending))
		for id := range s.pending {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		for _, id := range ids {
			res, err := s.c.Get(ctx, id)
			if err != nil {
				log.Printf("reservation %s: %v", id, err)
				continue
			}
			if res.State == reservations.Reserved {
				continue
			}
			s.mu.Lock()
			delete(s.pending, id)
			s.mu.Unlock()
			if res.State == reservations.Committed {
				sum := "none"
				if h, v := res.ChecksumHeader(); h != "" {
					sum = h + ": " + v
				}
				log.Printf("committed: %s/%s (%s) %d bytes, ETag %s, checksum %s", res.Bucket, res.Key, res.Metadata, *res.Size, res.ETag, sum)
			} else {
				log.Printf("%s: %s/%s, nothing was published", res.State, res.Bucket, res.Key)
			}
		}
	}
}
