package badinput

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/sigv4"
)

func answers(status int, codes ...string) []Answer {
	if len(codes) == 0 {
		return []Answer{{Status: status}}
	}
	out := make([]Answer, len(codes))
	for i, c := range codes {
		out[i] = Answer{status, c}
	}
	return out
}

func join(lists ...[]Answer) []Answer {
	var out []Answer
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

var (
	ok200 = answers(200)
	// unparsable: what a request whose framing cannot be parsed may get.
	unparsable = answers(400, "BadRequest")
	// tooLarge: a header section over the server's limit.
	tooLarge = join(answers(400, "RequestHeaderSectionTooLarge"), answers(431, "RequestHeaderSectionTooLarge"))
)

// smuggle is a valid signed PutObject of the run's key name: the request a
// case hides where a confused server would execute it.
func (e *env) smuggle(name string) []byte {
	return e.request("PUT", e.path(e.key(name)), []byte("smuggled"))
}

// replace returns headers with every header named name (any case) given
// value, or with it removed when value is "".
func replace(hs []hdr, name, value string) []hdr {
	var out []hdr
	for _, h := range hs {
		if strings.EqualFold(h.name, name) {
			if value == "" {
				continue
			}
			h.value = value
		}
		out = append(out, h)
	}
	return out
}

func header(hs []hdr, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.name, name) {
			return h.value
		}
	}
	return ""
}

// putHeaders is a signed PutObject's headers for body, with extra signed too.
func (e *env) putHeaders(key string, body []byte, extra ...hdr) (string, []hdr) {
	target := e.path(key)
	return target, e.signed("PUT", target, sha256Hex(body), append([]hdr{contentLength(len(body))}, extra...)...)
}

// withAuth is a signed PutObject of body whose Authorization is rewritten.
func (e *env) withAuth(key string, body []byte, auth func(s signer, v string) string) []byte {
	target, hs := e.putHeaders(key, body)
	return wire("PUT", target, replace(hs, "Authorization", auth(e.signer(), header(hs, "Authorization"))), body)
}

func md5b64(b []byte) string {
	sum := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(sum[:])
}

func deleteXML(keys ...string) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>`)
	for _, k := range keys {
		b.WriteString("<Object><Key>" + k + "</Key></Object>")
	}
	b.WriteString("</Delete>")
	return b.Bytes()
}

// deleteObjects is a signed DeleteObjects of body with its Content-MD5 (md5
// "" computes it).
func (e *env) deleteObjects(body []byte, md5 string) []byte {
	if md5 == "" {
		md5 = md5b64(body)
	}
	return e.request("POST", e.path("")+"?delete", body, hdr{"Content-Md5", md5}, hdr{"Content-Type", "application/xml"})
}

// complete is a signed CompleteMultipartUpload, of an upload of its own
// with part 1 uploaded, of the document doc(etag of part 1).
func (e *env) complete(name string, doc func(etag string) []byte) ([]byte, error) {
	u, err := e.openUpload(name)
	if err != nil {
		return nil, err
	}
	return e.request("POST", e.path(u.key)+"?uploadId="+url.QueryEscape(u.id), doc(u.etag), hdr{"Content-Type", "application/xml"}), nil
}

func completeXML(root, part, etag string) []byte {
	return []byte("<" + root + "><Part><PartNumber>" + part + "</PartNumber><ETag>" + etag + "</ETag></Part></" + root + ">")
}

func nested(root, inner string, depth int) []byte {
	var b bytes.Buffer
	b.WriteString("<" + root + ">")
	for range depth {
		b.WriteString("<" + inner + ">")
	}
	for range depth {
		b.WriteString("</" + inner + ">")
	}
	b.WriteString("</" + root + ">")
	return b.Bytes()
}

// huge is an XML document of n bytes or more of the given root.
func huge(root string, n int) []byte {
	var b bytes.Buffer
	b.WriteString("<" + root + ">")
	for b.Len() < n {
		b.WriteString("<Object><Key>" + strings.Repeat("k", 200) + "</Key></Object>")
	}
	b.WriteString("</" + root + ">")
	return b.Bytes()
}

func build(f func(e *env) []byte) func(*env) ([]byte, error) {
	return func(e *env) ([]byte, error) { return f(e), nil }
}

// Cases is the whole corpus, controls first.
func Cases() []Case {
	var cs []Case
	add := func(c ...Case) { cs = append(cs, c...) }
	body := []byte("the bad part is the only bad part")

	// Controls: the corpus's own signing and framing are right.
	add(
		Case{Name: "control-put", What: "a valid signed PutObject", control: true, backend: true, Accept: ok200,
			written: []string{"control-put"},
			build:   build(func(e *env) []byte { return e.request("PUT", e.path(e.key("control-put")), body) })},
		Case{Name: "control-put-aws-chunked", What: "a valid PutObject in signed aws-chunked framing", control: true, backend: true,
			Accept: ok200, written: []string{"control-chunked"},
			build: build(func(e *env) []byte {
				return e.chunkedPut(e.key("control-chunked"), bytes.Repeat(body, 100), 1024, -1, nil)
			})},
		Case{Name: "control-put-unsigned-trailer", What: "a valid PutObject in unsigned aws-chunked framing with a CRC32 trailer",
			control: true, backend: true, Accept: ok200, written: []string{"control-trailer"},
			build: build(func(e *env) []byte {
				return e.unsignedTrailerPut(e.key("control-trailer"), body, "x-amz-checksum-crc32:"+crc32b64(body))
			})},
		Case{Name: "control-delete-objects", What: "a valid DeleteObjects of an absent key", control: true, backend: true,
			method: "POST", Accept: ok200,
			build: build(func(e *env) []byte { return e.deleteObjects(deleteXML(e.key("absent")), "") })},
	)

	// Authorization.
	add(
		Case{Name: "auth-garbage", What: "Authorization: garbage", Accept: answers(400, "InvalidArgument"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(signer, string) string { return "garbage" })
			})},
		Case{Name: "auth-missing-signature", What: "no Signature= component", Accept: answers(400, "AuthorizationHeaderMalformed"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(_ signer, v string) string { return v[:strings.Index(v, ", Signature=")] })
			})},
		Case{Name: "auth-missing-credential", What: "no Credential= component", Accept: answers(400, "AuthorizationHeaderMalformed"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(_ signer, v string) string {
					return algorithm + " " + v[strings.Index(v, "SignedHeaders="):]
				})
			})},
		Case{Name: "auth-wrong-algorithm", What: "AWS4-HMAC-SHA512 instead of AWS4-HMAC-SHA256", Accept: answers(400, "InvalidArgument"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(_ signer, v string) string { return strings.Replace(v, "SHA256", "SHA512", 1) })
			})},
		Case{Name: "auth-bad-signature", What: "a well-formed signature of the wrong bytes", Accept: answers(403, "SignatureDoesNotMatch"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(_ signer, v string) string {
					return v[:strings.Index(v, "Signature=")] + "Signature=" + strings.Repeat("0", 64)
				})
			})},
		Case{Name: "auth-signature-not-hex", What: "Signature=zz...", Accept: join(answers(403, "SignatureDoesNotMatch"), answers(400, "AuthorizationHeaderMalformed")),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(_ signer, v string) string {
					return v[:strings.Index(v, "Signature=")] + "Signature=" + strings.Repeat("z", 64)
				})
			})},
		Case{Name: "auth-unknown-key", What: "an access key the endpoint does not know", Accept: answers(403, "InvalidAccessKeyId"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(s signer, v string) string {
					return strings.Replace(v, "Credential="+s.access+"/", "Credential=AKIDBADINPUTUNKNOWN00/", 1)
				})
			})},
		// A gateway bound to a region (--region) names the wrong one; one that
		// takes any region (the default, as the store decides) finds the
		// signature wrong, since it was made for another scope.
		Case{Name: "auth-wrong-region", What: "a credential scope for another region", Accept: join(answers(400, "AuthorizationHeaderMalformed"), answers(403, "SignatureDoesNotMatch")),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				return e.withAuth(e.key("auth"), body, func(s signer, v string) string {
					return strings.Replace(v, "/"+s.region+"/s3/", "/xx-nowhere-9/s3/", 1)
				})
			})},
		Case{Name: "auth-duplicated", What: "two Authorization headers, both valid", Accept: answers(400, "AuthorizationHeaderMalformed", "InvalidArgument"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("auth"), body)
				return wire("PUT", target, append(hs, hdr{"authorization", header(hs, "Authorization")}), body)
			})},
		Case{Name: "auth-duplicated-garbage-first", What: "Authorization: garbage, then a valid one", Accept: answers(400, "AuthorizationHeaderMalformed", "InvalidArgument"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("auth"), body)
				v := header(hs, "Authorization")
				hs = append(replace(hs, "Authorization", "garbage"), hdr{"Authorization", v})
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "auth-header-and-query", What: "header authentication and a presigned query together", Accept: answers(400, "InvalidArgument", "InvalidRequest", "AuthorizationQueryParametersError"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				s := e.signer()
				target := e.path(e.key("auth")) + "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + url.QueryEscape(s.access+"/"+s.scope()) +
					"&X-Amz-Date=" + s.date() + "&X-Amz-Expires=300&X-Amz-SignedHeaders=host&X-Amz-Signature=" + strings.Repeat("0", 64)
				return e.request("PUT", target, body)
			})},
		Case{Name: "auth-skewed-date", What: "signed an hour ago", Accept: answers(403, "RequestTimeTooSkewed"),
			smuggled: []string{"auth"},
			build: build(func(e *env) []byte {
				s := e.signer()
				s.now = s.now.Add(-time.Hour)
				target := e.path(e.key("auth"))
				hs := []hdr{{"Host", e.addr}, {"X-Amz-Date", s.date()}, {"X-Amz-Content-Sha256", sha256Hex(body)}, contentLength(len(body))}
				names := signedNames(hs)
				hs = append(hs, hdr{"Authorization", s.authorization(names, s.signature("PUT", target, hs, names, sha256Hex(body)))})
				return wire("PUT", target, hs, body)
			})},
	)

	// Content-Length.
	add(
		Case{Name: "cl-shorter-than-body", What: "Content-Length 5, a longer body signed whole", Accept: answers(400, "XAmzContentSHA256Mismatch"),
			smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "5"), body)
			})},
		Case{Name: "cl-longer-than-body", What: "Content-Length 100, 33 bytes sent, then the client's end", Accept: answers(400, "IncompleteBody"),
			smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "100"), body)
			})},
		Case{Name: "cl-negative", What: "Content-Length: -1", Accept: unparsable, smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "-1"), body)
			})},
		Case{Name: "cl-non-numeric", What: "Content-Length: 33abc", Accept: unparsable, smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "33abc"), body)
			})},
		Case{Name: "cl-plus-sign", What: "Content-Length: +33", Accept: unparsable, smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "+33"), body)
			})},
		Case{Name: "cl-list", What: "Content-Length: 33, 33", Accept: unparsable, smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "33, 33"), body)
			})},
		Case{Name: "cl-overflow", What: "Content-Length: 99999999999999999999999", Accept: unparsable, smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", "99999999999999999999999"), body)
			})},
		Case{Name: "cl-two-different", What: "Content-Length: 5 and Content-Length: 33", Accept: unparsable, smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, append([]hdr{{"Content-Length", "5"}}, hs...), body)
			})},
		Case{Name: "cl-missing", What: "a PutObject with a body and neither Content-Length nor Transfer-Encoding",
			Accept: join(answers(411, "MissingContentLength"), answers(400, "XAmzContentSHA256Mismatch")), smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("cl"), body)
				return wire("PUT", target, replace(hs, "Content-Length", ""), body)
			})},
		Case{Name: "cl-over-5gib", What: "a PutObject declaring 5 TiB (S3's limit is 5 GiB) with Expect: 100-continue, 33 bytes sent",
			Accept: join(answers(400, "EntityTooLarge"), answers(413, "EntityTooLarge")), smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target := e.path(e.key("cl"))
				hs := e.signed("PUT", target, unsignedPayload, hdr{"Content-Length", strconv.FormatInt(5<<40, 10)}, hdr{"Expect", "100-continue"})
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "chunked-over-5gib", What: "an aws-chunked PutObject declaring a decoded length of 5 TiB, with Expect: 100-continue",
			Accept: join(answers(400, "EntityTooLarge"), answers(413, "EntityTooLarge")), smuggled: []string{"cl"},
			build: build(func(e *env) []byte {
				target := e.path(e.key("cl"))
				hs := e.signed("PUT", target, unsignedTrailer, hdr{"Content-Encoding", "aws-chunked"},
					hdr{"X-Amz-Decoded-Content-Length", strconv.FormatInt(5<<40, 10)}, hdr{"X-Amz-Trailer", "x-amz-checksum-crc32"},
					hdr{"Content-Length", strconv.FormatInt(5<<40+1<<20, 10)}, hdr{"Expect", "100-continue"})
				return wire("PUT", target, hs, body)
			})},
	)

	// aws-chunked framing.
	data := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB: chunks of 1 KiB
	chunked := func(name, what string, accept []Answer, decoded int, alter func([][]byte) [][]byte) Case {
		return Case{Name: name, What: what, Accept: accept, smuggled: []string{"chunked"}, backend: true,
			build: build(func(e *env) []byte { return e.chunkedPut(e.key("chunked"), data, 1024, decoded, alter) })}
	}
	setLine := func(i int, f func(line string) string) func([][]byte) [][]byte {
		return func(fr [][]byte) [][]byte {
			line, rest, _ := bytes.Cut(fr[i], []byte("\r\n"))
			fr[i] = append([]byte(f(string(line))+"\r\n"), rest...)
			return fr
		}
	}
	add(
		chunked("chunk-size-not-hex", "a chunk size of zz", answers(400, "InvalidRequest", "IncompleteBody"), -1,
			setLine(1, func(l string) string { return "zz" + l[strings.Index(l, ";"):] })),
		chunked("chunk-size-huge", "a chunk size of ffffffffffff", answers(400, "InvalidRequest", "IncompleteBody"), -1,
			setLine(1, func(l string) string { return "ffffffffffff" + l[strings.Index(l, ";"):] })),
		chunked("chunk-signature-missing", "a chunk without ;chunk-signature=", answers(400, "InvalidRequest"), -1,
			setLine(2, func(l string) string { return l[:strings.Index(l, ";")] })),
		chunked("chunk-signature-wrong", "a chunk signed with the wrong signature", answers(403, "SignatureDoesNotMatch"), -1,
			setLine(2, func(l string) string { return l[:strings.Index(l, "=")+1] + strings.Repeat("0", 64) })),
		chunked("chunk-final-missing", "the final zero-length chunk never comes", answers(400, "IncompleteBody"), -1,
			func(fr [][]byte) [][]byte { return fr[:len(fr)-1] }),
		chunked("chunk-final-truncated", "the final chunk cut in its signature", answers(400, "IncompleteBody", "InvalidRequest"), -1,
			func(fr [][]byte) [][]byte { fr[len(fr)-1] = fr[len(fr)-1][:20]; return fr }),
		chunked("chunk-data-short", "a chunk with fewer bytes than its size", answers(400, "InvalidRequest", "IncompleteBody", "SignatureDoesNotMatch"), -1,
			func(fr [][]byte) [][]byte {
				f := fr[1]
				fr[1] = append(append([]byte{}, f[:len(f)-12]...), "\r\n"...)
				return fr
			}),
		chunked("chunk-decoded-length-larger", "x-amz-decoded-content-length 1 byte more than the chunks carry", answers(400, "IncompleteBody"), len(data)+1, nil),
		chunked("chunk-decoded-length-smaller", "x-amz-decoded-content-length 1 byte less than the chunks carry", answers(400, "IncompleteBody"), len(data)-1, nil),
		Case{Name: "chunk-trailer-checksum-wrong", What: "unsigned aws-chunked with a wrong CRC32 trailer", backend: true,
			Accept: answers(400, "BadDigest", "InvalidRequest"), smuggled: []string{"chunked"},
			build: build(func(e *env) []byte {
				return e.unsignedTrailerPut(e.key("chunked"), body, "x-amz-checksum-crc32:"+crc32b64([]byte("other bytes")))
			})},
		Case{Name: "chunk-trailer-missing", What: "unsigned aws-chunked announcing a trailer it never sends", backend: true,
			Accept: answers(400, "MalformedTrailerError", "InvalidRequest", "IncompleteBody"), smuggled: []string{"chunked"},
			build: build(func(e *env) []byte { return e.unsignedTrailerPut(e.key("chunked"), body, "") })},
	)

	// Oversized and repeated headers, unsigned headers that matter.
	add(
		Case{Name: "header-oversized", What: "one 20 KiB header", Accept: tooLarge, smuggled: []string{"headers"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("headers"), body, hdr{"X-Pad", strings.Repeat("a", 20<<10)})
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "header-very-many", What: "3,000 headers", Accept: tooLarge, smuggled: []string{"headers"},
			build: build(func(e *env) []byte {
				var extra []hdr
				for i := range 3000 {
					extra = append(extra, hdr{fmt.Sprintf("X-Pad-%04d", i), "1"})
				}
				target, hs := e.putHeaders(e.key("headers"), body)
				return wire("PUT", target, append(hs, extra...), body)
			})},
		Case{Name: "header-many-unsigned-amz", What: "400 unsigned x-amz-meta-* headers", Accept: answers(403, "AccessDenied"),
			smuggled: []string{"headers"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("headers"), body)
				for i := range 400 {
					hs = append(hs, hdr{fmt.Sprintf("x-amz-meta-p%03d", i), "1"})
				}
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "header-metadata-too-large", What: "3 KiB of signed x-amz-meta-* (S3 allows 2 KB)", Accept: answers(400, "MetadataTooLarge"),
			smuggled: []string{"metadata"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("metadata"), body, hdr{"x-amz-meta-big", strings.Repeat("m", 3<<10)})
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "request-line-oversized", What: "a 20 KiB request target", Accept: join(tooLarge, answers(414), answers(400, "KeyTooLongError")),
			build: build(func(e *env) []byte {
				return e.request("PUT", e.path(e.key(strings.Repeat("k", 20<<10))), body)
			})},
		Case{Name: "dup-host", What: "two Host headers", Accept: unparsable, smuggled: []string{"dup"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("dup"), body)
				return wire("PUT", target, append(hs, hdr{"Host", "other.invalid"}), body)
			})},
		Case{Name: "dup-x-amz-date", What: "two X-Amz-Date headers, both signed", Accept: join(answers(400, "InvalidArgument", "AuthorizationHeaderMalformed", "InvalidRequest"), answers(403, "AccessDenied", "SignatureDoesNotMatch")),
			smuggled: []string{"dup"},
			build: build(func(e *env) []byte {
				s := e.signer()
				target, hs := e.putHeaders(e.key("dup"), body, hdr{"x-amz-date", s.now.Add(-time.Hour).UTC().Format(amzDate)})
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "dup-x-amz-content-sha256", What: "two x-amz-content-sha256: the body's hash and UNSIGNED-PAYLOAD, both signed",
			Accept:   join(answers(400, "InvalidArgument", "XAmzContentSHA256Mismatch", "InvalidRequest"), answers(403, "AccessDenied", "SignatureDoesNotMatch")),
			smuggled: []string{"dup"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("dup"), body, hdr{"x-amz-content-sha256", unsignedPayload})
				return wire("PUT", target, hs, body)
			})},
		Case{Name: "dup-x-amz-copy-source", What: "two x-amz-copy-source (different spellings), both signed", Accept: answers(400, "InvalidArgument"),
			smuggled: []string{"copy"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("copy"), nil,
					hdr{"x-amz-copy-source", e.path(e.key("control-put"))}, hdr{"X-Amz-Copy-Source", e.path(e.key("control-chunked"))})
				return wire("PUT", target, hs, nil)
			})},
		Case{Name: "unsigned-copy-source", What: "x-amz-copy-source added outside SignedHeaders", Accept: answers(403, "AccessDenied"),
			smuggled: []string{"copy"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("copy"), nil)
				return wire("PUT", target, append(hs, hdr{"x-amz-copy-source", e.path(e.key("control-put"))}), nil)
			})},
		Case{Name: "copy-source-traversal", What: "x-amz-copy-source /bucket/../bucket/key", Accept: answers(400, "InvalidArgument"),
			smuggled: []string{"copy"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("copy"), nil,
					hdr{"x-amz-copy-source", "/" + e.t.Bucket + "/../" + e.t.Bucket + "/" + escapePath(e.key("control-put"))})
				return wire("PUT", target, hs, nil)
			})},
		Case{Name: "copy-source-bad-escape", What: "x-amz-copy-source with %zz", Accept: answers(400, "InvalidArgument"),
			smuggled: []string{"copy"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("copy"), nil, hdr{"x-amz-copy-source", e.path(e.key("a")) + "%zz"})
				return wire("PUT", target, hs, nil)
			})},
	)

	// XML documents: CompleteMultipartUpload (of an open upload) and DeleteObjects.
	completeCase := func(name, what string, accept []Answer, doc func(etag string) []byte) Case {
		return Case{Name: name, What: what, Accept: accept, method: "POST", backend: true, smuggled: []string{name},
			build: func(e *env) ([]byte, error) { return e.complete(name, doc) }}
	}
	deleteCase := func(name, what string, accept []Answer, doc func(e *env) []byte, md5 string) Case {
		return Case{Name: name, What: what, Accept: accept, method: "POST", backend: true,
			build: build(func(e *env) []byte { return e.deleteObjects(doc(e), md5) })}
	}
	malformed := answers(400, "MalformedXML")
	add(
		completeCase("complete-missing-part", "a well-formed Complete naming a part never uploaded", answers(400, "InvalidPart"), func(etag string) []byte {
			return completeXML("CompleteMultipartUpload", "2", etag)
		}),
		completeCase("complete-not-xml", "a Complete body that is not XML", malformed, func(string) []byte { return []byte("this is not XML {]") }),
		completeCase("complete-empty", "a Complete with no body", join(malformed, answers(400, "InvalidRequest")), func(string) []byte { return nil }),
		completeCase("complete-wrong-root", "a Complete of the uploaded part whose root is <Delete>", malformed, func(etag string) []byte {
			return completeXML("Delete", "1", etag)
		}),
		// SeaweedFS answers a Complete naming no part NoSuchUpload.
		completeCase("complete-deeply-nested", "a Complete nested 100,000 elements deep", join(malformed, answers(404, "NoSuchUpload")), func(string) []byte {
			return nested("CompleteMultipartUpload", "CompleteMultipartUpload", 100000)
		}),
		completeCase("complete-huge", "a 9 MiB Complete", join(answers(400, "MaxMessageLengthExceeded"), malformed), func(string) []byte {
			return huge("CompleteMultipartUpload", 9<<20)
		}),
	)
	// Ids the gateway looks up or records: bytes PostgreSQL's text cannot hold.
	idCase := func(name, what, method, query string, accept []Answer) Case {
		return Case{Name: name, What: what, Accept: accept, method: method, backend: true, smuggled: []string{"id"},
			build: build(func(e *env) []byte {
				var doc []byte
				if method == "POST" {
					doc = completeXML("CompleteMultipartUpload", "1", `"00000000000000000000000000000000"`)
				}
				return e.request(method, e.path(e.key("id"))+"?"+query, doc)
			})}
	}
	// What a store answers an id it never made (the gateway sends these on).
	unknownID := join(answers(400, "InvalidRequest", "InvalidArgument"), answers(404, "NoSuchUpload", "NoSuchVersion"))
	add(
		idCase("complete-upload-id-nul", "CompleteMultipartUpload of uploadId %00", "POST", "uploadId=%00", answers(404, "NoSuchUpload")),
		idCase("complete-upload-id-not-utf8", "CompleteMultipartUpload of uploadId %FF", "POST", "uploadId=%FF", answers(404, "NoSuchUpload")),
		idCase("abort-upload-id-nul", "AbortMultipartUpload of uploadId %00", "DELETE", "uploadId=%00", unknownID),
		idCase("abort-upload-id-not-utf8", "AbortMultipartUpload of uploadId %FF", "DELETE", "uploadId=%FF", unknownID),
		idCase("delete-version-id-nul", "DeleteObject of versionId %00", "DELETE", "versionId=%00", unknownID),
		idCase("delete-version-id-not-utf8", "DeleteObject of versionId %FF", "DELETE", "versionId=%FF", unknownID),
		idCase("upload-part-id-nul", "UploadPart into uploadId %00", "PUT", "partNumber=1&uploadId=%00", unknownID),
		deleteCase("delete-not-xml", "a DeleteObjects body that is not XML", malformed, func(e *env) []byte { return []byte("this is not XML {]") }, ""),
		deleteCase("delete-empty", "a DeleteObjects naming no key", malformed, func(e *env) []byte { return []byte("<Delete></Delete>") }, ""),
		deleteCase("delete-wrong-root", "a DeleteObjects whose root is <CompleteMultipartUpload>", malformed, func(e *env) []byte {
			return []byte("<CompleteMultipartUpload><Object><Key>" + e.key("wrong-root") + "</Key></Object></CompleteMultipartUpload>")
		}, ""),
		deleteCase("delete-1001-keys", "a DeleteObjects of 1,001 keys", malformed, func(e *env) []byte {
			keys := make([]string, 1001)
			for i := range keys {
				keys[i] = e.key("k" + strconv.Itoa(i))
			}
			return deleteXML(keys...)
		}, ""),
		deleteCase("delete-deeply-nested", "a DeleteObjects nested 100,000 elements deep", malformed, func(e *env) []byte {
			return nested("Delete", "Delete", 100000)
		}, ""),
		deleteCase("delete-huge", "a 9 MiB DeleteObjects", join(answers(400, "MaxMessageLengthExceeded"), malformed), func(e *env) []byte {
			return huge("Delete", 9<<20)
		}, ""),
		deleteCase("delete-content-md5-wrong", "a DeleteObjects whose Content-MD5 is another body's", answers(400, "BadDigest"), func(e *env) []byte {
			return deleteXML(e.key("md5"))
		}, md5b64([]byte("another body"))),
		deleteCase("delete-key-nul", "a DeleteObjects naming a key with a NUL byte", malformed, func(e *env) []byte {
			return deleteXML(e.key("\x00"))
		}, ""),
		deleteCase("delete-key-not-utf8", "a DeleteObjects naming a key with a byte 0xFF", malformed, func(e *env) []byte {
			return deleteXML(e.key("\xff"))
		}, ""),
		deleteCase("delete-content-md5-invalid", "Content-MD5: not base64", answers(400, "InvalidDigest"), func(e *env) []byte {
			return deleteXML(e.key("md5"))
		}, "not base64!"),
	)

	// Keys.
	keyCase := func(name, what string, accept []Answer, target func(e *env) string) Case {
		return Case{Name: name, What: what, Accept: accept, smuggled: []string{"key"},
			build: build(func(e *env) []byte { return e.request("PUT", target(e), body) })}
	}
	add(
		keyCase("key-too-long", "a 1,025-byte key", answers(400, "KeyTooLongError"), func(e *env) string {
			return e.path(e.key(strings.Repeat("k", 1025)))
		}),
		keyCase("key-invalid-utf8-c328", "a key with %C3%28 (invalid UTF-8)", answers(400, "InvalidArgument"), func(e *env) string {
			return e.path(e.key("key")) + "%C3%28"
		}),
		keyCase("key-invalid-utf8-ff", "a key with %FF", answers(400, "InvalidArgument"), func(e *env) string {
			return e.path(e.key("key")) + "%FF"
		}),
		keyCase("key-bad-escape", "a key with %zz", answers(400, "InvalidURI"), func(e *env) string {
			return e.path(e.key("key")) + "%zz"
		}),
		keyCase("key-nul", "a key with %00", answers(400, "InvalidArgument"), func(e *env) string {
			return e.path(e.key("key")) + "%00"
		}),
	)

	// Path tricks.
	add(
		keyCase("path-dotdot", "/bucket/../bucket/key", answers(400, "InvalidArgument"), func(e *env) string {
			return "/" + e.t.Bucket + "/../" + e.t.Bucket + "/" + escapePath(e.key("key"))
		}),
		keyCase("path-dotdot-encoded", "/bucket/%2e%2e/bucket/key", answers(400, "InvalidArgument"), func(e *env) string {
			return "/" + e.t.Bucket + "/%2e%2e/" + e.t.Bucket + "/" + escapePath(e.key("key"))
		}),
		keyCase("path-dotdot-bucket", "/%2e%2e/bucket/key", answers(400, "InvalidBucketName"), func(e *env) string {
			return "/%2e%2e/" + e.t.Bucket + "/" + escapePath(e.key("key"))
		}),
		keyCase("path-double-slash", "//bucket/key", answers(400, "InvalidURI"), func(e *env) string {
			return "/" + e.path(e.key("key"))
		}),
		keyCase("path-dot-segments-in-key", "/bucket/folder/./../key", answers(400, "InvalidArgument"), func(e *env) string {
			return e.path(e.key("key")) + "/./../key"
		}),
		Case{Name: "path-backslash", What: `GET /bucket/..\..\key`, method: "GET", Accept: join(answers(400, "InvalidArgument"), answers(404, "NoSuchKey")),
			build: build(func(e *env) []byte {
				return e.request("GET", e.path(e.key(`..\..\key`)), nil)
			})},
		Case{Name: "path-backslash-raw", What: `GET /bucket/..\key with a raw backslash on the wire`, method: "GET",
			Accept: join(answers(400, "InvalidArgument", "BadRequest"), answers(404, "NoSuchKey")),
			build: build(func(e *env) []byte {
				return e.request("GET", e.path(e.key("x"))+`/..\key`, nil)
			})},
		keyCase("path-nul-raw", "a raw NUL byte in the request target", unparsable, func(e *env) string {
			return e.path(e.key("key")) + "\x00"
		}),
		keyCase("path-no-slash", "a request target without its leading slash", join(unparsable, answers(400, "InvalidURI")), func(e *env) string {
			return strings.TrimPrefix(e.path(e.key("key")), "/")
		}),
		Case{Name: "path-absolute-form-other-host", What: "PUT http://other.invalid/bucket/key, Host and signature for the endpoint",
			Accept: join(answers(400, "InvalidURI"), answers(403, "SignatureDoesNotMatch")), smuggled: []string{"key"},
			build: build(func(e *env) []byte {
				target, hs := e.putHeaders(e.key("key"), body)
				return wire("PUT", "http://other.invalid"+target, hs, body)
			})},
	)

	// Request smuggling: framing two parsers could read differently. The
	// smuggled request is a valid signed PutObject; it must never run.
	smuggleCase := func(name, what string, accept []Answer, f func(e *env, smuggled []byte) []byte) Case {
		return Case{Name: name, What: what, Accept: accept, smuggled: []string{name, name + "-smuggled"},
			build: build(func(e *env) []byte { return f(e, e.smuggle(name+"-smuggled")) })}
	}
	// clte: a PutObject with Content-Length covering the whole rest and a
	// chunked body that ends at once, the smuggled request behind it.
	clte := func(e *env, name string, smuggled []byte, framing ...hdr) []byte {
		rest := append([]byte("0\r\n\r\n"), smuggled...)
		target := e.path(e.key(name))
		// Signed for an empty payload: what a server honouring the chunked
		// framing reads, while one reading Content-Length reads more.
		hs := e.signed("PUT", target, sigv4.EmptySHA256, append(framing, contentLength(len(rest)))...)
		return wire("PUT", target, hs, rest)
	}
	framingRefused := join(unparsable, answers(411, "MissingContentLength"), answers(400, "IncompleteBody", "InvalidRequest", "XAmzContentSHA256Mismatch"))
	add(
		smuggleCase("smuggle-cl-te", "Content-Length and Transfer-Encoding: chunked", framingRefused, func(e *env, s []byte) []byte {
			return clte(e, "smuggle-cl-te", s, hdr{"Transfer-Encoding", "chunked"})
		}),
		smuggleCase("smuggle-te-twice", "Transfer-Encoding: chunked twice", framingRefused, func(e *env, s []byte) []byte {
			return clte(e, "smuggle-te-twice", s, hdr{"Transfer-Encoding", "chunked"}, hdr{"Transfer-Encoding", "chunked"})
		}),
		smuggleCase("smuggle-te-xchunked", "Transfer-Encoding: xchunked", framingRefused, func(e *env, s []byte) []byte {
			return clte(e, "smuggle-te-xchunked", s, hdr{"Transfer-Encoding", "xchunked"})
		}),
		smuggleCase("smuggle-te-list", "Transfer-Encoding: gzip, chunked", framingRefused, func(e *env, s []byte) []byte {
			return clte(e, "smuggle-te-list", s, hdr{"Transfer-Encoding", "gzip, chunked"})
		}),
		smuggleCase("smuggle-te-space-before-colon", "Transfer-Encoding : chunked", framingRefused, func(e *env, s []byte) []byte {
			return clte(e, "smuggle-te-space-before-colon", s, hdr{"Transfer-Encoding ", "chunked"})
		}),
		smuggleCase("smuggle-te-obs-fold", "Transfer-Encoding folded onto a continuation line", framingRefused, func(e *env, s []byte) []byte {
			return clte(e, "smuggle-te-obs-fold", s, hdr{"X-Fold", "a\r\n Transfer-Encoding: chunked"})
		}),
		smuggleCase("smuggle-cl-obs-fold", "Content-Length: 0 continued by an obs-fold line", framingRefused, func(e *env, s []byte) []byte {
			target := e.path(e.key("smuggle-cl-obs-fold"))
			hs := e.signed("PUT", target, sha256Hex(nil), hdr{"Content-Length", "0\r\n " + strconv.Itoa(len(s))})
			return wire("PUT", target, hs, s)
		}),
		smuggleCase("smuggle-bare-lf", "a header line ended by a bare LF that hides a Transfer-Encoding",
			join(framingRefused, answers(403, "SignatureDoesNotMatch")), func(e *env, s []byte) []byte {
				return clte(e, "smuggle-bare-lf", s, hdr{"X-Amz-Meta-Note", "x\nTransfer-Encoding: chunked"})
			}),
		smuggleCase("smuggle-http10-te", "HTTP/1.0 with Transfer-Encoding: chunked", framingRefused, func(e *env, s []byte) []byte {
			raw := clte(e, "smuggle-http10-te", s, hdr{"Transfer-Encoding", "chunked"})
			return bytes.Replace(raw, []byte(" HTTP/1.1\r\n"), []byte(" HTTP/1.0\r\n"), 1)
		}),
		smuggleCase("smuggle-chunk-size-overflow", "Transfer-Encoding: chunked with a chunk size past 2^64", framingRefused, func(e *env, s []byte) []byte {
			target := e.path(e.key("smuggle-chunk-size-overflow"))
			hs := e.signed("PUT", target, unsignedPayload, hdr{"Transfer-Encoding", "chunked"})
			return wire("PUT", target, hs, append([]byte("1ffffffffffffffff\r\nx\r\n0\r\n\r\n"), s...))
		}),
		smuggleCase("smuggle-behind-refused", "a request refused before its body (bad signature), a request as its body", answers(403, "SignatureDoesNotMatch"),
			func(e *env, s []byte) []byte {
				target, hs := e.putHeaders(e.key("smuggle-behind-refused"), s)
				v := header(hs, "Authorization")
				hs = replace(hs, "Authorization", v[:len(v)-64]+strings.Repeat("0", 64))
				return wire("PUT", target, hs, s)
			}),
		smuggleCase("smuggle-behind-expect", "Expect: 100-continue refused (unsigned copy source), the body sent anyway is a request", answers(403, "AccessDenied"),
			func(e *env, s []byte) []byte {
				target, hs := e.putHeaders(e.key("smuggle-behind-expect"), s, hdr{"Expect", "100-continue"})
				hs = append(hs, hdr{"x-amz-copy-source", e.path(e.key("control-put"))})
				return wire("PUT", target, hs, s)
			}),
		Case{Name: "smuggle-get-with-body", What: "a GET whose body (by its Content-Length) is a request", method: "GET",
			Accept: answers(404, "NoSuchKey"), smuggled: []string{"smuggle-get-with-body-smuggled"},
			build: build(func(e *env) []byte {
				s := e.smuggle("smuggle-get-with-body-smuggled")
				return e.request("GET", e.path(e.key("absent")), s)
			})},
	)
	add(formCases()...)
	return cs
}

func crc32b64(b []byte) string {
	sum := crc32.ChecksumIEEE(b)
	return base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
}
