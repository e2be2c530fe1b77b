package conformance

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/tags"

	"github.com/fencegate/fencegate/internal/testenv"
)

// goSDKVariant is one aws-sdk-go-v2 configuration.
type goSDKVariant struct {
	opts []func(*s3.Options)
	algo types.ChecksumAlgorithm // set explicitly on uploads; "" leaves it to the SDK
}

var (
	// The SDK's defaults (which compute a CRC32 on every upload that supports one).
	goSDKDefault = goSDKVariant{}
	// Request checksums on, and an explicit CRC32C on every upload and part.
	goSDKChecksums = goSDKVariant{opts: []func(*s3.Options){func(o *s3.Options) {
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenSupported
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenSupported
	}}, algo: types.ChecksumAlgorithmCrc32c}
	// Checksums only where an operation requires one (the SDK's older behaviour).
	goSDKWhenRequired = goSDKVariant{opts: []func(*s3.Options){func(o *s3.Options) {
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}}}
)

// httpStatus is the HTTP status of an SDK error, or 0.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// wantStatus fails unless err is an answer with HTTP status code.
func wantStatus(t *testing.T, what string, err error, code int) {
	t.Helper()
	if got := httpStatus(err); got != code {
		t.Fatalf("%s: %v (status %d), want status %d", what, err, got, code)
	}
}

// copySource is an x-amz-copy-source value: each path segment URL-encoded, and
// "+" spelled %2B so that it cannot be read as a space.
func copySource(bucket, key string) string {
	segs := strings.Split(key, "/")
	for i, s := range segs {
		segs[i] = strings.ReplaceAll(url.PathEscape(s), "+", "%2B")
	}
	return bucket + "/" + strings.Join(segs, "/")
}

func goSDKLifecycle(t *testing.T, fx *clientFixture, v goSDKVariant) {
	c := fx.ep.S3Client(v.opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bucket := testenv.Bucket(t)

	// Bucket create and list.
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	t.Cleanup(func() { removeBucket(t, fx.verify, bucket) })
	lb, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatalf("ListBuckets: %v", err)
	}
	if !slices.ContainsFunc(lb.Buckets, func(b types.Bucket) bool { return aws.ToString(b.Name) == bucket }) {
		t.Fatalf("ListBuckets lacks %s", bucket)
	}

	// Metadata round trip.
	m := uploadMeta.clone()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(keySmall), Body: bytes.NewReader(fx.small),
		Metadata: m.User, ContentType: &m.ContentType, CacheControl: &m.CacheControl, ContentDisposition: &m.ContentDisposition,
		ChecksumAlgorithm: v.algo}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(keySmall)})
	if err != nil {
		t.Fatalf("HeadObject: %v", err)
	}
	checkMeta(t, "HeadObject", m, head.Metadata, aws.ToString(head.ContentType), aws.ToString(head.CacheControl), aws.ToString(head.ContentDisposition))
	if aws.ToInt64(head.ContentLength) != int64(len(fx.small)) {
		t.Fatalf("HeadObject: Content-Length %d, want %d", aws.ToInt64(head.ContentLength), len(fx.small))
	}
	etag, lastModified := aws.ToString(head.ETag), aws.ToTime(head.LastModified)
	get := func(what string, in *s3.GetObjectInput) ([]byte, *s3.GetObjectOutput, error) {
		t.Helper()
		in.Bucket = &bucket
		out, err := c.GetObject(ctx, in)
		if err != nil {
			return nil, nil, err
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatalf("%s: reading the body: %v", what, err)
		}
		return b, out, nil
	}
	got, out, err := get("GetObject", &s3.GetObjectInput{Key: aws.String(keySmall)})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	sameBytes(t, "GetObject", got, fx.small)
	checkMeta(t, "GetObject", m, out.Metadata, aws.ToString(out.ContentType), aws.ToString(out.CacheControl), aws.ToString(out.ContentDisposition))

	// Range GETs.
	got, out, err = get("ranged GetObject", &s3.GetObjectInput{Key: aws.String(keySmall), Range: aws.String("bytes=100-1099")})
	if err != nil {
		t.Fatalf("GetObject bytes=100-1099: %v", err)
	}
	sameBytes(t, "GetObject bytes=100-1099", got, fx.small[100:1100])
	if want := fmt.Sprintf("bytes 100-1099/%d", len(fx.small)); aws.ToString(out.ContentRange) != want {
		t.Fatalf("GetObject bytes=100-1099: Content-Range %q, want %q", aws.ToString(out.ContentRange), want)
	}
	got, _, err = get("suffix GetObject", &s3.GetObjectInput{Key: aws.String(keySmall), Range: aws.String("bytes=-500")})
	if err != nil {
		t.Fatalf("GetObject bytes=-500: %v", err)
	}
	sameBytes(t, "GetObject bytes=-500", got, fx.small[len(fx.small)-500:])

	// Conditional GETs.
	got, _, err = get("If-Match", &s3.GetObjectInput{Key: aws.String(keySmall), IfMatch: &etag})
	if err != nil {
		t.Fatalf("GetObject If-Match current ETag: %v", err)
	}
	sameBytes(t, "GetObject If-Match current ETag", got, fx.small)
	_, _, err = get("If-Match", &s3.GetObjectInput{Key: aws.String(keySmall), IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)})
	wantStatus(t, "GetObject If-Match other ETag", err, http.StatusPreconditionFailed)
	_, _, err = get("If-None-Match", &s3.GetObjectInput{Key: aws.String(keySmall), IfNoneMatch: &etag})
	wantStatus(t, "GetObject If-None-Match current ETag", err, http.StatusNotModified)
	if _, _, err = get("If-None-Match", &s3.GetObjectInput{Key: aws.String(keySmall), IfNoneMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)}); err != nil {
		t.Fatalf("GetObject If-None-Match other ETag: %v", err)
	}
	_, _, err = get("If-Modified-Since", &s3.GetObjectInput{Key: aws.String(keySmall), IfModifiedSince: &lastModified})
	wantStatus(t, "GetObject If-Modified-Since Last-Modified", err, http.StatusNotModified)
	_, _, err = get("If-Unmodified-Since", &s3.GetObjectInput{Key: aws.String(keySmall), IfUnmodifiedSince: aws.Time(lastModified.Add(-time.Hour))})
	wantStatus(t, "GetObject If-Unmodified-Since an hour before", err, http.StatusPreconditionFailed)
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(keySmall), IfNoneMatch: &etag})
	wantStatus(t, "HeadObject If-None-Match current ETag", err, http.StatusNotModified)

	// Multipart upload, three parts, metadata given at creation.
	mp, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(keyBig),
		Metadata: m.User, ContentType: &m.ContentType, CacheControl: &m.CacheControl, ContentDisposition: &m.ContentDisposition,
		ChecksumAlgorithm: v.algo})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	var parts []types.CompletedPart
	for i, off := 0, 0; off < len(fx.big); i, off = i+1, off+partSize {
		n := int32(i + 1)
		body := fx.big[off:min(off+partSize, len(fx.big))]
		up, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String(keyBig), UploadId: mp.UploadId,
			PartNumber: &n, Body: bytes.NewReader(body), ChecksumAlgorithm: v.algo})
		if err != nil {
			t.Fatalf("UploadPart %d: %v", n, err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: &n, ETag: up.ETag, ChecksumCRC32: up.ChecksumCRC32, ChecksumCRC32C: up.ChecksumCRC32C})
	}
	if len(parts) < 3 {
		t.Fatalf("only %d parts", len(parts))
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String(keyBig), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatalf("CompleteMultipartUpload: %v", err)
	}
	if bigETag := fx.expectObject(t, bucket, keyBig, fx.big, &m); !strings.HasSuffix(bigETag, fmt.Sprintf("-%d\"", len(parts))) {
		t.Fatalf("multipart ETag %s, want a -%d suffix", bigETag, len(parts))
	}

	// UploadPartCopy: a range of the big object, a fresh part, then the whole small object.
	const keyPartCopy = "copy/part copy.bin"
	mp, err = c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(keyPartCopy), ChecksumAlgorithm: v.algo})
	if err != nil {
		t.Fatalf("CreateMultipartUpload: %v", err)
	}
	fresh := fx.big[partSize : 2*partSize]
	pc1, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &bucket, Key: aws.String(keyPartCopy), UploadId: mp.UploadId, PartNumber: aws.Int32(1),
		CopySource: aws.String(copySource(bucket, keyBig)), CopySourceRange: aws.String(fmt.Sprintf("bytes=0-%d", partSize-1))})
	if err != nil {
		t.Fatalf("UploadPartCopy 1: %v", err)
	}
	up2, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: aws.String(keyPartCopy), UploadId: mp.UploadId, PartNumber: aws.Int32(2),
		Body: bytes.NewReader(fresh), ChecksumAlgorithm: v.algo})
	if err != nil {
		t.Fatalf("UploadPart 2: %v", err)
	}
	pc3, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &bucket, Key: aws.String(keyPartCopy), UploadId: mp.UploadId, PartNumber: aws.Int32(3),
		CopySource: aws.String(copySource(bucket, keySmall)), CopySourceIfMatch: &etag})
	if err != nil {
		t.Fatalf("UploadPartCopy 3: %v", err)
	}
	cparts := []types.CompletedPart{
		{PartNumber: aws.Int32(1), ETag: pc1.CopyPartResult.ETag, ChecksumCRC32C: pc1.CopyPartResult.ChecksumCRC32C},
		{PartNumber: aws.Int32(2), ETag: up2.ETag, ChecksumCRC32C: up2.ChecksumCRC32C},
		{PartNumber: aws.Int32(3), ETag: pc3.CopyPartResult.ETag, ChecksumCRC32C: pc3.CopyPartResult.ChecksumCRC32C},
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String(keyPartCopy), UploadId: mp.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cparts}}); err != nil {
		t.Fatalf("CompleteMultipartUpload (part copies): %v", err)
	}
	fx.expectObject(t, bucket, keyPartCopy, concat(fx.big[:partSize], fresh, fx.small), nil)

	// CopyObject with both metadata directives.
	const keyCopied, keyReplaced = "copy/copied.bin", "copy/replaced.bin"
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String(keyCopied), CopySource: aws.String(copySource(bucket, keySmall)),
		MetadataDirective: types.MetadataDirectiveCopy}); err != nil {
		t.Fatalf("CopyObject COPY: %v", err)
	}
	fx.expectObject(t, bucket, keyCopied, fx.small, &m)
	r := replaceMeta.clone()
	if _, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String(keyReplaced), CopySource: aws.String(copySource(bucket, keySmall)),
		MetadataDirective: types.MetadataDirectiveReplace, Metadata: r.User, ContentType: &r.ContentType}); err != nil {
		t.Fatalf("CopyObject REPLACE: %v", err)
	}
	fx.expectObject(t, bucket, keyReplaced, fx.small, &r)

	// Tagging.
	tagSet := []types.Tag{{Key: aws.String("project"), Value: aws.String("fencegate")}, {Key: aws.String("tier"), Value: aws.String("gold")}}
	if _, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: &bucket, Key: aws.String(keySmall), Tagging: &types.Tagging{TagSet: tagSet}}); err != nil {
		t.Fatalf("PutObjectTagging: %v", err)
	}
	tg, err := c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &bucket, Key: aws.String(keySmall)})
	if err != nil {
		t.Fatalf("GetObjectTagging: %v", err)
	}
	if got := tagMap(tg.TagSet); !equalMaps(got, map[string]string{"project": "fencegate", "tier": "gold"}) {
		t.Fatalf("GetObjectTagging: %v", got)
	}
	if _, err := c.DeleteObjectTagging(ctx, &s3.DeleteObjectTaggingInput{Bucket: &bucket, Key: aws.String(keySmall)}); err != nil {
		t.Fatalf("DeleteObjectTagging: %v", err)
	}
	if tg, err = c.GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: &bucket, Key: aws.String(keySmall)}); err != nil || len(tg.TagSet) != 0 {
		t.Fatalf("GetObjectTagging after DeleteObjectTagging: %v %v", tagMap(tg.TagSet), err)
	}

	// Presigned PUT and GET.
	const keyPresigned = "presigned/put me.bin"
	pc := s3.NewPresignClient(c, s3.WithPresignExpires(5*time.Minute))
	pput, err := pc.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(keyPresigned)})
	if err != nil {
		t.Fatalf("PresignPutObject: %v", err)
	}
	fx.fetch(t, pput.Method, pput.URL, fx.small, pput.SignedHeader)
	fx.expectObject(t, bucket, keyPresigned, fx.small, nil)
	pget, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(keyBig)})
	if err != nil {
		t.Fatalf("PresignGetObject: %v", err)
	}
	sameBytes(t, "presigned GET", fx.fetch(t, pget.Method, pget.URL, nil, pget.SignedHeader), fx.big)

	// Listing.
	goSDKListing(t, ctx, c, fx)

	// DeleteObjects (a key that never existed counts as deleted).
	del := []string{keyPartCopy, keyCopied, keyReplaced, keyPresigned, "never/existed"}
	var ids []types.ObjectIdentifier
	for _, k := range del {
		ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
	}
	do, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: ids}})
	if err != nil {
		t.Fatalf("DeleteObjects: %v", err)
	}
	if len(do.Errors) != 0 || len(do.Deleted) != len(del) {
		t.Fatalf("DeleteObjects: %d deleted, errors %+v; want %d deleted", len(do.Deleted), do.Errors, len(del))
	}
	fx.expectKeys(t, bucket, keySmall, keyBig)

	// DeleteObject, then the bucket.
	for _, k := range []string{keySmall, keyBig} {
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(k)}); err != nil {
			t.Fatalf("DeleteObject %s: %v", k, err)
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("DeleteBucket: %v", err)
	}
	fx.expectNoBucket(t, bucket)
}

func tagMap(ts []types.Tag) map[string]string {
	m := map[string]string{}
	for _, t := range ts {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

// goSDKListing lists the shared listing bucket with ListObjectsV2 (default page
// size: past 1,000 keys takes a continuation), with a prefix and a delimiter, and
// with ListObjects (v1, markers).
func goSDKListing(t *testing.T, ctx context.Context, c *s3.Client, fx *clientFixture) {
	t.Helper()
	lb := fx.listBucket
	list2 := func(in *s3.ListObjectsV2Input) (keys, prefixes []string, pages int) {
		t.Helper()
		in.Bucket = &lb
		p := s3.NewListObjectsV2Paginator(c, in)
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				t.Fatalf("ListObjectsV2 prefix %q delimiter %q: %v", aws.ToString(in.Prefix), aws.ToString(in.Delimiter), err)
			}
			pages++
			for _, o := range page.Contents {
				keys = append(keys, aws.ToString(o.Key))
			}
			for _, p := range page.CommonPrefixes {
				prefixes = append(prefixes, aws.ToString(p.Prefix))
			}
		}
		return keys, prefixes, pages
	}
	keys, _, pages := list2(&s3.ListObjectsV2Input{})
	sameKeys(t, "ListObjectsV2", keys, fx.listKeys)
	if pages < 2 {
		t.Fatalf("ListObjectsV2 of %d keys took %d page(s)", len(keys), pages)
	}
	keys, prefixes, _ := list2(&s3.ListObjectsV2Input{Prefix: aws.String(listPrefix), Delimiter: aws.String("/")})
	sameKeys(t, "ListObjectsV2 prefix list/ delimiter /: keys", keys, fx.directKeys())
	sameKeys(t, "ListObjectsV2 prefix list/ delimiter /: common prefixes", prefixes, []string{"list/a/", "list/b/"})
	keys, _, _ = list2(&s3.ListObjectsV2Input{Prefix: aws.String(listBPrefix), MaxKeys: aws.Int32(300)})
	sameKeys(t, "ListObjectsV2 prefix list/b/ 300 a page", keys, fx.keysUnder(listBPrefix))

	// ListObjects (v1): the next marker is the last key of a page.
	var v1 []string
	var marker *string
	for pages = 1; ; pages++ {
		out, err := c.ListObjects(ctx, &s3.ListObjectsInput{Bucket: &lb, Marker: marker, MaxKeys: aws.Int32(400)})
		if err != nil {
			t.Fatalf("ListObjects: %v", err)
		}
		for _, o := range out.Contents {
			v1 = append(v1, aws.ToString(o.Key))
		}
		if !aws.ToBool(out.IsTruncated) || len(out.Contents) == 0 {
			break
		}
		marker = out.Contents[len(out.Contents)-1].Key
		if out.NextMarker != nil {
			marker = out.NextMarker
		}
	}
	sameKeys(t, "ListObjects (v1)", v1, fx.listKeys)
	if pages != 3 {
		t.Fatalf("ListObjects (v1), 400 a page: %d pages, want 3", pages)
	}
}

// ---- minio-go ----

func minioLifecycleDefault(t *testing.T, fx *clientFixture) { minioLifecycle(t, fx, false) }

func minioLifecycleTrailers(t *testing.T, fx *clientFixture) { minioLifecycle(t, fx, true) }

// minioLifecycle runs the lifecycle with minio-go: signed streaming uploads over
// HTTP, and with trailers on, checksums in a trailer.
func minioLifecycle(t *testing.T, fx *clientFixture, trailers bool) {
	u, err := url.Parse(fx.ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if fx.insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(fx.ep.AccessKey, fx.ep.SecretKey, ""),
		Secure: u.Scheme == "https", Transport: tr, Region: fx.ep.Region, BucketLookup: minio.BucketLookupPath, TrailingHeaders: trailers})
	if err != nil {
		t.Fatal(err)
	}
	var checksum minio.ChecksumType
	if trailers {
		checksum = minio.ChecksumCRC32C
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bucket := testenv.Bucket(t)

	// Bucket create and list.
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: fx.ep.Region}); err != nil {
		t.Fatalf("MakeBucket: %v", err)
	}
	t.Cleanup(func() { removeBucket(t, fx.verify, bucket) })
	if ok, err := mc.BucketExists(ctx, bucket); !ok || err != nil {
		t.Fatalf("BucketExists: %v %v", ok, err)
	}
	bs, err := mc.ListBuckets(ctx)
	if err != nil {
		t.Fatalf("ListBuckets: %v", err)
	}
	if !slices.ContainsFunc(bs, func(b minio.BucketInfo) bool { return b.Name == bucket }) {
		t.Fatalf("ListBuckets lacks %s", bucket)
	}

	// Metadata round trip.
	m := uploadMeta.clone()
	putOpts := func() minio.PutObjectOptions {
		return minio.PutObjectOptions{UserMetadata: m.clone().User, ContentType: m.ContentType, CacheControl: m.CacheControl,
			ContentDisposition: m.ContentDisposition, PartSize: partSize, Checksum: checksum}
	}
	if _, err := mc.PutObject(ctx, bucket, keySmall, bytes.NewReader(fx.small), int64(len(fx.small)), putOpts()); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	st, err := mc.StatObject(ctx, bucket, keySmall, minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("StatObject: %v", err)
	}
	checkMeta(t, "StatObject", m, st.UserMetadata, st.ContentType, st.Metadata.Get("Cache-Control"), st.Metadata.Get("Content-Disposition"))
	if st.Size != int64(len(fx.small)) {
		t.Fatalf("StatObject: size %d, want %d", st.Size, len(fx.small))
	}
	get := func(key string, set func(*minio.GetObjectOptions) error) ([]byte, error) {
		t.Helper()
		var o minio.GetObjectOptions
		if set != nil {
			if err := set(&o); err != nil {
				t.Fatal(err)
			}
		}
		obj, err := mc.GetObject(ctx, bucket, key, o)
		if err != nil {
			return nil, err
		}
		defer obj.Close()
		return io.ReadAll(obj)
	}
	wantMinioStatus := func(what string, err error, code int) {
		t.Helper()
		if got := minio.ToErrorResponse(err).StatusCode; got != code {
			t.Fatalf("%s: %v (status %d), want status %d", what, err, got, code)
		}
	}
	got, err := get(keySmall, nil)
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	sameBytes(t, "GetObject", got, fx.small)
	fx.expectObject(t, bucket, keySmall, fx.small, &m)

	// Range GETs.
	if got, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetRange(100, 1099) }); err != nil {
		t.Fatalf("GetObject bytes=100-1099: %v", err)
	}
	sameBytes(t, "GetObject bytes=100-1099", got, fx.small[100:1100])
	if got, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetRange(0, -500) }); err != nil {
		t.Fatalf("GetObject bytes=-500: %v", err)
	}
	sameBytes(t, "GetObject bytes=-500", got, fx.small[len(fx.small)-500:])

	// Conditional GETs.
	if got, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetMatchETag(st.ETag) }); err != nil {
		t.Fatalf("GetObject If-Match current ETag: %v", err)
	}
	sameBytes(t, "GetObject If-Match current ETag", got, fx.small)
	_, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetMatchETag("0123456789abcdef0123456789abcdef") })
	wantMinioStatus("GetObject If-Match other ETag", err, http.StatusPreconditionFailed)
	_, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetMatchETagExcept(st.ETag) })
	wantMinioStatus("GetObject If-None-Match current ETag", err, http.StatusNotModified)
	_, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetModified(st.LastModified) })
	wantMinioStatus("GetObject If-Modified-Since Last-Modified", err, http.StatusNotModified)
	_, err = get(keySmall, func(o *minio.GetObjectOptions) error { return o.SetUnmodified(st.LastModified.Add(-time.Hour)) })
	wantMinioStatus("GetObject If-Unmodified-Since an hour before", err, http.StatusPreconditionFailed)

	// Multipart: 5 MiB parts make three.
	if _, err := mc.PutObject(ctx, bucket, keyBig, bytes.NewReader(fx.big), int64(len(fx.big)), putOpts()); err != nil {
		t.Fatalf("PutObject (multipart): %v", err)
	}
	if etag := fx.expectObject(t, bucket, keyBig, fx.big, &m); !strings.HasSuffix(etag, "-3\"") {
		t.Fatalf("multipart ETag %s, want a -3 suffix", etag)
	}
	if got, err = get(keyBig, nil); err != nil {
		t.Fatalf("GetObject (multipart): %v", err)
	}
	sameBytes(t, "GetObject (multipart)", got, fx.big)

	// ComposeObject: UploadPartCopy of a range of the big object and the whole small one.
	const keyComposed = "copy/com posed.bin"
	if _, err := mc.ComposeObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: keyComposed},
		minio.CopySrcOptions{Bucket: bucket, Object: keyBig, MatchRange: true, Start: 0, End: partSize - 1},
		minio.CopySrcOptions{Bucket: bucket, Object: keySmall, MatchETag: st.ETag}); err != nil {
		t.Fatalf("ComposeObject: %v", err)
	}
	fx.expectObject(t, bucket, keyComposed, concat(fx.big[:partSize], fx.small), nil)

	// CopyObject with both metadata directives.
	const keyCopied, keyReplaced = "copy/copied.bin", "copy/replaced.bin"
	if _, err := mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: keyCopied},
		minio.CopySrcOptions{Bucket: bucket, Object: keySmall}); err != nil {
		t.Fatalf("CopyObject (COPY): %v", err)
	}
	fx.expectObject(t, bucket, keyCopied, fx.small, &m)
	r := replaceMeta.clone()
	if _, err := mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: keyReplaced, ReplaceMetadata: true,
		UserMetadata: r.clone().User, ContentType: r.ContentType}, minio.CopySrcOptions{Bucket: bucket, Object: keySmall}); err != nil {
		t.Fatalf("CopyObject (REPLACE): %v", err)
	}
	fx.expectObject(t, bucket, keyReplaced, fx.small, &r)

	// Tagging.
	want := map[string]string{"project": "fencegate", "tier": "gold"}
	tg, err := tags.NewTags(want, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.PutObjectTagging(ctx, bucket, keySmall, tg, minio.PutObjectTaggingOptions{}); err != nil {
		t.Fatalf("PutObjectTagging: %v", err)
	}
	if tg, err = mc.GetObjectTagging(ctx, bucket, keySmall, minio.GetObjectTaggingOptions{}); err != nil || !equalMaps(tg.ToMap(), want) {
		t.Fatalf("GetObjectTagging: %v %v", tg, err)
	}
	if err := mc.RemoveObjectTagging(ctx, bucket, keySmall, minio.RemoveObjectTaggingOptions{}); err != nil {
		t.Fatalf("RemoveObjectTagging: %v", err)
	}
	if tg, err = mc.GetObjectTagging(ctx, bucket, keySmall, minio.GetObjectTaggingOptions{}); err != nil || len(tg.ToMap()) != 0 {
		t.Fatalf("GetObjectTagging after RemoveObjectTagging: %v %v", tg, err)
	}

	// Presigned PUT and GET.
	const keyPresigned = "presigned/put me.bin"
	pu, err := mc.PresignedPutObject(ctx, bucket, keyPresigned, 5*time.Minute)
	if err != nil {
		t.Fatalf("PresignedPutObject: %v", err)
	}
	fx.fetch(t, http.MethodPut, pu.String(), fx.small, nil)
	fx.expectObject(t, bucket, keyPresigned, fx.small, nil)
	pu, err = mc.PresignedGetObject(ctx, bucket, keyBig, 5*time.Minute, nil)
	if err != nil {
		t.Fatalf("PresignedGetObject: %v", err)
	}
	sameBytes(t, "presigned GET", fx.fetch(t, http.MethodGet, pu.String(), nil, nil), fx.big)

	// Listing: v2 and v1, recursive, and by "folder" (prefix + delimiter).
	list := func(o minio.ListObjectsOptions) (keys, prefixes []string) {
		t.Helper()
		for oi := range mc.ListObjects(ctx, fx.listBucket, o) {
			if oi.Err != nil {
				t.Fatalf("ListObjects %+v: %v", o, oi.Err)
			}
			if strings.HasSuffix(oi.Key, "/") {
				prefixes = append(prefixes, oi.Key)
			} else {
				keys = append(keys, oi.Key)
			}
		}
		return keys, prefixes
	}
	keys, _ := list(minio.ListObjectsOptions{Recursive: true})
	sameKeys(t, "ListObjects (v2) recursive", keys, fx.listKeys)
	keys, _ = list(minio.ListObjectsOptions{Recursive: true, UseV1: true})
	sameKeys(t, "ListObjects (v1) recursive", keys, fx.listKeys)
	keys, prefixes := list(minio.ListObjectsOptions{Prefix: listPrefix})
	sameKeys(t, "ListObjects prefix list/ delimiter /: keys", keys, fx.directKeys())
	sameKeys(t, "ListObjects prefix list/ delimiter /: common prefixes", prefixes, []string{"list/a/", "list/b/"})

	// RemoveObjects (DeleteObjects), then RemoveObject, then the bucket.
	del := []string{keyComposed, keyCopied, keyReplaced, keyPresigned, "never/existed"}
	ch := make(chan minio.ObjectInfo, len(del))
	for _, k := range del {
		ch <- minio.ObjectInfo{Key: k}
	}
	close(ch)
	for e := range mc.RemoveObjects(ctx, bucket, ch, minio.RemoveObjectsOptions{}) {
		t.Fatalf("RemoveObjects: %s: %v", e.ObjectName, e.Err)
	}
	fx.expectKeys(t, bucket, keySmall, keyBig)
	for _, k := range []string{keySmall, keyBig} {
		if err := mc.RemoveObject(ctx, bucket, k, minio.RemoveObjectOptions{}); err != nil {
			t.Fatalf("RemoveObject %s: %v", k, err)
		}
	}
	if err := mc.RemoveBucket(ctx, bucket); err != nil {
		t.Fatalf("RemoveBucket: %v", err)
	}
	if ok, err := mc.BucketExists(ctx, bucket); ok || err != nil {
		t.Fatalf("BucketExists after RemoveBucket: %v %v", ok, err)
	}
}
