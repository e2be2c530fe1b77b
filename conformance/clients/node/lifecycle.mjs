// An object lifecycle with @aws-sdk/client-s3 (unmodified, default settings but
// for path-style addressing), run by conformance/clients_node_test.go.
//
// Environment: FG_ENDPOINT, FG_ACCESS_KEY, FG_SECRET_KEY, FG_REGION, FG_BUCKET (a
// bucket to create and delete), FG_LIST_BUCKET (the shared 1,050-key bucket) and
// FG_LIST_EXPECT (a JSON file: what listing it must give). For an https endpoint
// with a self-signed certificate, set NODE_TLS_REJECT_UNAUTHORIZED=0.
//
// Exits 0 when every step matched; otherwise prints the failing step and exits 1.

import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import {
  S3Client,
  CreateBucketCommand,
  ListBucketsCommand,
  PutObjectCommand,
  HeadObjectCommand,
  GetObjectCommand,
  CreateMultipartUploadCommand,
  UploadPartCommand,
  UploadPartCopyCommand,
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  PutObjectTaggingCommand,
  GetObjectTaggingCommand,
  DeleteObjectTaggingCommand,
  ListObjectsCommand,
  DeleteObjectsCommand,
  DeleteObjectCommand,
  DeleteBucketCommand,
  HeadBucketCommand,
  paginateListObjectsV2,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`environment variable ${name} is not set`);
  return v;
}

const endpoint = env("FG_ENDPOINT");
const Bucket = env("FG_BUCKET");
const listBucket = env("FG_LIST_BUCKET");
const listing = JSON.parse(readFileSync(env("FG_LIST_EXPECT"), "utf8"));
const config = {
  endpoint,
  region: env("FG_REGION"),
  credentials: { accessKeyId: env("FG_ACCESS_KEY"), secretAccessKey: env("FG_SECRET_KEY") },
  forcePathStyle: true,
};
const client = new S3Client(config);

const MiB = 1 << 20;
const partSize = 5 * MiB;
const small = randomBytes(64 * 1024 + 13);
const big = randomBytes(2 * partSize + MiB + 7);
const meta = {
  Metadata: { color: "blue", owner: "fencegate conformance", note: "x=1 y=2" },
  ContentType: "application/x-fencegate-test",
  CacheControl: "max-age=3600, private",
  ContentDisposition: 'attachment; filename="report.bin"',
};
const replaced = { Metadata: { stage: "replaced" }, ContentType: "text/x-fencegate-replaced" };
const keySmall = "docs/hello world+1.bin";
const keyBig = "big/multi part.bin";

let step = "start";
const log = (msg) => console.log(`node @aws-sdk/client-s3: ${msg}`);
const sha = (b) => createHash("sha256").update(b).digest("hex");

class Mismatch extends Error {}
function check(cond, msg) {
  if (!cond) throw new Mismatch(msg);
}
function sameBytes(what, got, want) {
  check(Buffer.compare(Buffer.from(got), want) === 0,
    `${what}: got ${got.length} bytes sha256 ${sha(got)}, want ${want.length} bytes sha256 ${sha(want)}`);
}
function sameJSON(what, got, want) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  check(g === w, `${what}: got ${g.length > 400 ? g.slice(0, 400) + "..." : g}, want ${w.length > 400 ? w.slice(0, 400) + "..." : w}`);
}
function sortedObject(o) {
  return Object.fromEntries(Object.entries(o ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)));
}
function checkMeta(what, out, want) {
  sameJSON(`${what}: user metadata`, sortedObject(out.Metadata), sortedObject(want.Metadata));
  for (const f of ["ContentType", "CacheControl", "ContentDisposition"]) {
    check((out[f] ?? "") === (want[f] ?? ""), `${what}: ${f} ${JSON.stringify(out[f])}, want ${JSON.stringify(want[f])}`);
  }
}
async function send(command) {
  return client.send(command);
}
async function getBytes(input) {
  const out = await send(new GetObjectCommand({ Bucket, ...input }));
  return { out, body: Buffer.from(await out.Body.transformToByteArray()) };
}
async function expectStatus(what, promise, code) {
  try {
    const res = await promise;
    if (res?.out?.Body?.destroy) res.out.Body.destroy();
  } catch (e) {
    const got = e?.$metadata?.httpStatusCode;
    check(got === code, `${what}: ${e.name}: ${e.message} (status ${got}), want status ${code}`);
    return;
  }
  throw new Mismatch(`${what}: succeeded, want status ${code}`);
}
// An x-amz-copy-source: each segment URL-encoded ("+" as %2B).
function copySource(bucket, key) {
  return bucket + "/" + key.split("/").map((s) => encodeURIComponent(s)).join("/");
}
async function expectObject(key, want, wantMeta) {
  const { out, body } = await getBytes({ Key: key });
  sameBytes(`GET ${key}`, body, want);
  if (wantMeta) checkMeta(`GET ${key}`, out, wantMeta);
  return out;
}
async function keysIn(bucket, input = {}) {
  const keys = [], prefixes = [];
  let pages = 0;
  for await (const page of paginateListObjectsV2({ client }, { Bucket: bucket, ...input })) {
    pages++;
    for (const o of page.Contents ?? []) keys.push(o.Key);
    for (const p of page.CommonPrefixes ?? []) prefixes.push(p.Prefix);
  }
  return { keys, prefixes, pages };
}

async function main() {
  step = "bucket create and list";
  await send(new CreateBucketCommand({ Bucket }));
  const lb = await send(new ListBucketsCommand({}));
  check(lb.Buckets.some((b) => b.Name === Bucket), `ListBuckets lacks ${Bucket}`);

  step = "metadata round trip";
  await send(new PutObjectCommand({ Bucket, Key: keySmall, Body: small, ...meta }));
  const head = await send(new HeadObjectCommand({ Bucket, Key: keySmall }));
  checkMeta("HeadObject", head, meta);
  check(head.ContentLength === small.length, `HeadObject: ContentLength ${head.ContentLength}, want ${small.length}`);
  await expectObject(keySmall, small, meta);
  const etag = head.ETag, lastModified = head.LastModified;

  step = "range GETs";
  let r = await getBytes({ Key: keySmall, Range: "bytes=100-1099" });
  sameBytes("GetObject bytes=100-1099", r.body, small.subarray(100, 1100));
  check(r.out.ContentRange === `bytes 100-1099/${small.length}`, `Content-Range ${r.out.ContentRange}`);
  r = await getBytes({ Key: keySmall, Range: "bytes=-500" });
  sameBytes("GetObject bytes=-500", r.body, small.subarray(small.length - 500));

  step = "conditional GETs";
  r = await getBytes({ Key: keySmall, IfMatch: etag });
  sameBytes("GetObject If-Match current ETag", r.body, small);
  const other = '"0123456789abcdef0123456789abcdef"';
  await expectStatus("GetObject If-Match other ETag", getBytes({ Key: keySmall, IfMatch: other }), 412);
  await expectStatus("GetObject If-None-Match current ETag", getBytes({ Key: keySmall, IfNoneMatch: etag }), 304);
  r = await getBytes({ Key: keySmall, IfNoneMatch: other });
  sameBytes("GetObject If-None-Match other ETag", r.body, small);
  await expectStatus("GetObject If-Modified-Since Last-Modified", getBytes({ Key: keySmall, IfModifiedSince: lastModified }), 304);
  await expectStatus("GetObject If-Unmodified-Since an hour before",
    getBytes({ Key: keySmall, IfUnmodifiedSince: new Date(lastModified.getTime() - 3600e3) }), 412);

  step = "multipart upload (3 parts)";
  let mp = await send(new CreateMultipartUploadCommand({ Bucket, Key: keyBig, ...meta }));
  const parts = [];
  for (let off = 0, n = 1; off < big.length; off += partSize, n++) {
    const up = await send(new UploadPartCommand({ Bucket, Key: keyBig, UploadId: mp.UploadId, PartNumber: n, Body: big.subarray(off, off + partSize) }));
    parts.push({ PartNumber: n, ETag: up.ETag, ChecksumCRC32: up.ChecksumCRC32 });
  }
  check(parts.length === 3, `${parts.length} parts`);
  await send(new CompleteMultipartUploadCommand({ Bucket, Key: keyBig, UploadId: mp.UploadId, MultipartUpload: { Parts: parts } }));
  const bigOut = await expectObject(keyBig, big, meta);
  check(bigOut.ETag.endsWith('-3"'), `multipart ETag ${bigOut.ETag}, want a -3 suffix`);

  step = "UploadPartCopy";
  const keyPartCopy = "copy/part copy.bin";
  const fresh = big.subarray(partSize, 2 * partSize);
  mp = await send(new CreateMultipartUploadCommand({ Bucket, Key: keyPartCopy }));
  const pc1 = await send(new UploadPartCopyCommand({ Bucket, Key: keyPartCopy, UploadId: mp.UploadId, PartNumber: 1,
    CopySource: copySource(Bucket, keyBig), CopySourceRange: `bytes=0-${partSize - 1}` }));
  const up2 = await send(new UploadPartCommand({ Bucket, Key: keyPartCopy, UploadId: mp.UploadId, PartNumber: 2, Body: fresh }));
  const pc3 = await send(new UploadPartCopyCommand({ Bucket, Key: keyPartCopy, UploadId: mp.UploadId, PartNumber: 3,
    CopySource: copySource(Bucket, keySmall), CopySourceIfMatch: etag }));
  await send(new CompleteMultipartUploadCommand({ Bucket, Key: keyPartCopy, UploadId: mp.UploadId, MultipartUpload: { Parts: [
    { PartNumber: 1, ETag: pc1.CopyPartResult.ETag },
    { PartNumber: 2, ETag: up2.ETag, ChecksumCRC32: up2.ChecksumCRC32 },
    { PartNumber: 3, ETag: pc3.CopyPartResult.ETag },
  ] } }));
  await expectObject(keyPartCopy, Buffer.concat([big.subarray(0, partSize), fresh, small]));

  step = "CopyObject COPY and REPLACE";
  const keyCopied = "copy/copied.bin", keyReplaced = "copy/replaced.bin";
  await send(new CopyObjectCommand({ Bucket, Key: keyCopied, CopySource: copySource(Bucket, keySmall), MetadataDirective: "COPY" }));
  await expectObject(keyCopied, small, meta);
  await send(new CopyObjectCommand({ Bucket, Key: keyReplaced, CopySource: copySource(Bucket, keySmall), MetadataDirective: "REPLACE", ...replaced }));
  await expectObject(keyReplaced, small, replaced);

  step = "tagging";
  const TagSet = [{ Key: "project", Value: "fencegate" }, { Key: "tier", Value: "gold" }];
  await send(new PutObjectTaggingCommand({ Bucket, Key: keySmall, Tagging: { TagSet } }));
  let tg = await send(new GetObjectTaggingCommand({ Bucket, Key: keySmall }));
  sameJSON("GetObjectTagging", tg.TagSet.map(({ Key, Value }) => ({ Key, Value })).sort((a, b) => (a.Key < b.Key ? -1 : 1)), TagSet);
  await send(new DeleteObjectTaggingCommand({ Bucket, Key: keySmall }));
  tg = await send(new GetObjectTaggingCommand({ Bucket, Key: keySmall }));
  check((tg.TagSet ?? []).length === 0, `GetObjectTagging after DeleteObjectTagging: ${JSON.stringify(tg.TagSet)}`);

  step = "presigned PUT and GET";
  // With its default checksum setting the SDK presigns a PutObject with the
  // CRC32 of an empty body (x-amz-checksum-crc32=AAAAAA==): S3 must refuse the
  // upload, and keep nothing. AWS's workaround is a presigner that adds checksums
  // only when required.
  const keyPresigned = "presigned/put me.bin";
  let putURL = await getSignedUrl(client, new PutObjectCommand({ Bucket, Key: keyPresigned }), { expiresIn: 300 });
  check(putURL.includes("x-amz-checksum-crc32="), `default presigned PUT carries no CRC32 (the SDK changed?): ${putURL}`);
  let res = await fetch(putURL, { method: "PUT", body: small });
  check(res.status === 400, `presigned PUT with the empty body's CRC32: ${res.status} ${await res.text()}, want 400`);
  await expectStatus("HEAD after the refused presigned PUT", send(new HeadObjectCommand({ Bucket, Key: keyPresigned })), 404);
  const presigner = new S3Client({ ...config, requestChecksumCalculation: "WHEN_REQUIRED" });
  putURL = await getSignedUrl(presigner, new PutObjectCommand({ Bucket, Key: keyPresigned }), { expiresIn: 300 });
  res = await fetch(putURL, { method: "PUT", body: small });
  check(res.ok, `presigned PUT: ${res.status} ${await res.text()}`);
  await expectObject(keyPresigned, small);
  const getURL = await getSignedUrl(client, new GetObjectCommand({ Bucket, Key: keyBig }), { expiresIn: 300 });
  res = await fetch(getURL);
  check(res.ok, `presigned GET: ${res.status}`);
  sameBytes("presigned GET", Buffer.from(await res.arrayBuffer()), big);

  step = "listing";
  let l = await keysIn(listBucket);
  sameJSON("ListObjectsV2", l.keys, listing.keys);
  check(l.pages >= 2, `ListObjectsV2 of ${l.keys.length} keys took ${l.pages} page(s)`);
  l = await keysIn(listBucket, { Prefix: listing.prefix, Delimiter: "/" });
  sameJSON("ListObjectsV2 prefix+delimiter: keys", l.keys, listing.direct);
  sameJSON("ListObjectsV2 prefix+delimiter: common prefixes", l.prefixes, listing.prefixes);
  l = await keysIn(listBucket, { Prefix: listing.bPrefix, MaxKeys: 300 });
  sameJSON("ListObjectsV2 prefix, 300 a page", l.keys, listing.bKeys);
  const v1 = [];
  let Marker, pages = 0;
  for (;;) {
    const out = await send(new ListObjectsCommand({ Bucket: listBucket, Marker, MaxKeys: 400 }));
    pages++;
    for (const o of out.Contents ?? []) v1.push(o.Key);
    if (!out.IsTruncated || !(out.Contents ?? []).length) break;
    Marker = out.NextMarker ?? out.Contents[out.Contents.length - 1].Key;
  }
  sameJSON("ListObjects (v1)", v1, listing.keys);
  check(pages === 3, `ListObjects (v1), 400 a page: ${pages} pages, want 3`);

  step = "DeleteObjects";
  const del = [keyPartCopy, keyCopied, keyReplaced, keyPresigned, "never/existed"];
  const dr = await send(new DeleteObjectsCommand({ Bucket, Delete: { Objects: del.map((Key) => ({ Key })) } }));
  check(!(dr.Errors ?? []).length && (dr.Deleted ?? []).length === del.length,
    `DeleteObjects: deleted ${JSON.stringify(dr.Deleted)}, errors ${JSON.stringify(dr.Errors)}`);
  sameJSON("keys after DeleteObjects", (await keysIn(Bucket)).keys, [keyBig, keySmall].sort());

  step = "DeleteObject and DeleteBucket";
  for (const Key of [keySmall, keyBig]) await send(new DeleteObjectCommand({ Bucket, Key }));
  await send(new DeleteBucketCommand({ Bucket }));
  await expectStatus("HeadBucket after DeleteBucket", send(new HeadBucketCommand({ Bucket })), 404);
}

try {
  await main();
  log("lifecycle passed");
} catch (e) {
  const what = e instanceof Mismatch ? "mismatch" : `${e.name ?? "error"} (status ${e?.$metadata?.httpStatusCode ?? "-"})`;
  console.error(`node @aws-sdk/client-s3 lifecycle FAILED at step "${step}": ${what}: ${e.message}`);
  if (!(e instanceof Mismatch)) console.error(e.stack);
  process.exit(1);
}
