package gateway

import (
	"encoding/xml"
	"strings"
	"testing"
)

// Whatever a key or message holds, fencegate's own XML documents parse: a
// character XML 1.0 cannot carry (a control character, U+FFFE, U+FFFF) is
// written as U+FFFD, as the store writes it and Go's encoding/xml escapes
// it; so is a byte that is not UTF-8 (a path may carry one). Written raw,
// either made the whole answer unparsable: an SDK took a
// repeated CompleteMultipartUpload of such a key, answered 200, for an
// error (botocore as a 500, and tried it again).
func TestXMLEscapedAlwaysParses(t *testing.T) {
	var all strings.Builder
	for c := rune(0); c < 0x80; c++ {
		all.WriteRune(c)
	}
	all.WriteString("\uFFFE\uFFFF\u00e9\U0001F600")
	for _, s := range []string{"k4 +%\x01", "a\x00b", all.String(), "\x7f", "plain", "é", "<&>\"'", "bad \xff utf-8 \xe2\x82", "\xef\xbf"} {
		doc := append(appendXMLEscaped([]byte("<K>"), s), "</K>"...)
		var got string
		if err := xml.Unmarshal(doc, &got); err != nil {
			t.Errorf("%q: %q does not parse: %v", s, doc, err)
			continue
		}
		want := strings.Map(func(r rune) rune {
			if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
				return '\uFFFD'
			}
			return r
		}, s)
		if got != want {
			t.Errorf("%q reads back as %q, want %q", s, got, want)
		}
	}
}
