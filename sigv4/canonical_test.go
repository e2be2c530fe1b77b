package sigv4

import (
	"net/url"
	"testing"
)

func TestCanonicalURI(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "/",
		"/":                 "/",
		"/b/test$file.text": "/b/test%24file.text",
		"/b/a%2fb":          "/b/a%2Fb",
		"/b/a%2Fb//c":       "/b/a%2Fb//c",
		"/b/a+b":            "/b/a%2Bb",
		"/b/a%20b":          "/b/a%20b",
		"/b/%7e~%41":        "/b/~~A",
		"/b/100%":           "/b/100%25",
		"/b/%zz":            "/b/%25zz",
		"/b/é":              "/b/%C3%A9",
		"/b/!*'()":          "/b/%21%2A%27%28%29",
		"/b/./../x":         "/b/./../x",
	} {
		if got := string(appendCanonicalURI(nil, in)); got != want {
			t.Errorf("%q: got %q want %q", in, got, want)
		}
	}
}

func TestCanonicalQuery(t *testing.T) {
	var s scratchBuf
	for in, want := range map[string]string{
		"":                                 "",
		"acl":                              "acl=",
		"b=2&a=1&a=0":                      "a=0&a=1&b=2",
		"k=a+b&k=a%2Bb":                    "k=a%20b&k=a%2Bb",
		"prefix=&delimiter=/":              "delimiter=%2F&prefix=",
		"&&x=1&":                           "x=1",
		"X-Amz-Signature=abc&X-Amz-Date=1": "X-Amz-Date=1",
		"%58-Amz-Signature=abc&z":          "z=",
	} {
		if got := string(appendCanonicalQuery(nil, in, "X-Amz-Signature", &s)); got != want {
			t.Errorf("%q: got %q want %q", in, got, want)
		}
	}
}

func TestCanonicalHeaderValue(t *testing.T) {
	for in, want := range map[string]string{
		"  a   b  c ": "a b c",
		"":            "",
		"   ":         "",
		"x":           "x",
	} {
		for _, fold := range []Whitespace{FoldSpaces, FoldAllWhitespace} {
			if got := string(appendHeaderValue(nil, in, fold)); got != want {
				t.Errorf("%q, %s: got %q want %q", in, fold, got, want)
			}
		}
	}
	// A tab, a vertical tab and a no-break space are folded by one way only.
	for in, want := range map[string][2]string{
		" a\tb  c\t":         {"a\tb c\t", "a b c"},
		"a \t b":             {"a \t b", "a b"},
		"x\vy\u00a0z":        {"x\vy\u00a0z", "x y z"},
		"caf\u00e9  au lait": {"caf\u00e9 au lait", "caf\u00e9 au lait"},
	} {
		for i, fold := range []Whitespace{FoldSpaces, FoldAllWhitespace} {
			if got := string(appendHeaderValue(nil, in, fold)); got != want[i] {
				t.Errorf("%q, %s: got %q want %q", in, fold, got, want[i])
			}
		}
	}
}

func TestKeyCacheRotation(t *testing.T) {
	var c keyCache
	k1 := c.get("a", "s1", "20130524", "us-east-1", "s3")
	k2 := c.get("a", "s2", "20130524", "us-east-1", "s3")
	if k1 == k2 {
		t.Fatal("rotated secret reused the cached key")
	}
	if k1 != deriveSigningKey("s1", "20130524", "us-east-1", "s3") {
		t.Fatal("wrong key")
	}
	for i := range keyCacheMax + 10 {
		c.get(string(rune(i)), "s", "20130524", "us-east-1", "s3")
	}
	if len(c.m) > keyCacheMax {
		t.Fatalf("cache grew to %d", len(c.m))
	}
}

// A key written into a request path with AppendEscapedPath decodes back to
// itself and is already its own canonical URI: the store's path and the
// signature's are one encoding.
func TestAppendEscapedPath(t *testing.T) {
	for _, k := range []string{"a b", "a+b", "ü/ß", "x%y", "~!*'()", "a//b", "a\\b"} {
		esc := AppendEscapedPath(nil, k)
		back, err := url.PathUnescape(string(esc))
		if err != nil || back != k {
			t.Errorf("%q -> %q -> %q", k, esc, back)
		}
		if c := appendCanonicalURI(nil, "/"+string(esc)); string(c) != "/"+string(esc) {
			t.Errorf("%q: escaped %q, canonical %q", k, esc, c)
		}
	}
}
