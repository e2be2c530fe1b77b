package gateway

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/valyala/fasthttp"
)

// Behind a reverse proxy or a load balancer (docs/DESIGN.md, "Behind a
// proxy"), the Host the client signed, the scheme it used and its address
// reach fencegate in the proxy's headers: Forwarded (RFC 7239), else
// X-Forwarded-Host, X-Forwarded-Proto and X-Forwarded-For. They are believed
// only from the addresses of Config.TrustedProxies (--trusted-proxies): from
// anywhere else a client could name any host and address it liked, so they
// are ignored. Of a list of values, the last is taken: the one the proxy
// next to fencegate added, where a client's own forged one comes first.

// trustedProxies are the networks whose forwarding headers are believed.
type trustedProxies []netip.Prefix

func parseTrustedProxies(list []string) (trustedProxies, error) {
	var out trustedProxies
	for _, s := range list {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: not an address or a CIDR", s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %v", s, err)
		}
		bits := p.Bits()
		if p.Addr().Is4In6() {
			bits -= 96 // ::ffff:a.b.c.d/120 is a.b.c.d/24
		}
		if bits < 0 {
			return nil, fmt.Errorf("trusted proxy %q: an IPv4-mapped prefix shorter than /96", s)
		}
		out = append(out, netip.PrefixFrom(p.Addr().Unmap(), bits).Masked())
	}
	return out, nil
}

func (t trustedProxies) trusts(addr net.Addr) bool {
	if len(t) == 0 {
		return false
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return false
	}
	a, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return false
	}
	a = a.Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwarded is what a trusted proxy says of the client's request; each
// field is "" when it says nothing of it.
type forwarded struct {
	host, proto, client string
}

// forwardedFrom reads a trusted proxy's headers.
func forwardedFrom(h *fasthttp.RequestHeader) forwarded {
	var f forwarded
	if v := headerFold(h, "Forwarded"); v != "" {
		f = parseForwarded(lastListValue(v))
	}
	if f.host == "" {
		f.host = lastListValue(headerFold(h, "X-Forwarded-Host"))
	}
	if f.proto == "" {
		f.proto = strings.ToLower(lastListValue(headerFold(h, "X-Forwarded-Proto")))
	}
	if f.client == "" {
		f.client = lastListValue(headerFold(h, "X-Forwarded-For"))
	}
	if !validForwardedHost(f.host) {
		f.host = ""
	}
	if f.proto != "http" && f.proto != "https" {
		f.proto = ""
	}
	return f
}

// lastListValue is the last element of a comma-separated header value, trimmed.
func lastListValue(v string) string {
	if i := strings.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return strings.TrimSpace(v)
}

// parseForwarded reads one element of RFC 7239's Forwarded header:
// for=...;proto=...;host=..., values optionally quoted.
func parseForwarded(elem string) forwarded {
	var f forwarded
	for _, pair := range strings.Split(elem, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "host":
			f.host = v
		case "proto":
			f.proto = strings.ToLower(v)
		case "for":
			// "[2001:db8::1]:4711" or "192.0.2.43:47011": the address alone.
			if host, _, err := net.SplitHostPort(v); err == nil {
				v = host
			}
			f.client = strings.Trim(v, "[]")
		}
	}
	return f
}

// validForwardedHost: a host[:port] of the bytes a Host header may hold.
func validForwardedHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-_:[]", c) >= 0) {
			return false
		}
	}
	return true
}

// clientView is the request as the client sent it: the Host it signed, and
// its scheme and address where a trusted proxy says so.
func (s *Server) clientView(ctx *fasthttp.RequestCtx) (host []byte, f forwarded) {
	host = ctx.Request.Header.Host()
	if !s.proxies.trusts(ctx.RemoteAddr()) {
		return host, forwarded{}
	}
	f = forwardedFrom(&ctx.Request.Header)
	if f.host != "" {
		host = []byte(f.host)
	}
	return host, f
}

// clientEndpoint is the scheme and host the client reached the gateway at,
// as admission found them: the base of the URLs fencegate hands back.
func clientEndpoint(r *request) string { return r.scheme + "://" + r.host }

// objectURL is the object's URL as the client addresses the gateway: its
// endpoint, and the bucket in the path unless the host names it. It is the
// Location of a CompleteMultipartUpload's and a browser form's answer; the
// store's own would name the store.
func (s *Server) objectURL(r *request) string {
	u := clientEndpoint(r) + "/"
	if virtualHostBucket(stripPort(r.host), s.cfg.Domains) == "" {
		u += r.bucket + "/"
	}
	return u + (&url.URL{Path: r.key}).EscapedPath()
}
