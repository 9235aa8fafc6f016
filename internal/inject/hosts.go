package inject

import (
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// NormalHost returns a Cassandra contact point h as host:port for comparison, with Cassandra's
// port 9042 when h has none: an IP address in its canonical form (IPv4-mapped IPv6 as IPv4), a
// name in lower case. A name's trailing dot is kept: "db." is absolute, while "db" goes through
// the resolver's search domains (the resolving pod's namespace first) and may name another host.
// It does not resolve names: a name and its IP address are different hosts to it.
func NormalHost(h string) string {
	h = strings.TrimSpace(h)
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port = strings.Trim(h, "[]"), "9042"
	}
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(ip.Unmap().String(), port)
	}
	return net.JoinHostPort(strings.ToLower(host), port)
}

// OnOperatorServers says whether any of hosts is, normalised (NormalHost), one of the operator's
// contact points: a connection to them reaches the operator's servers, in any order, subset or
// spelling, and must use their TLS and may use their server name. It cannot see that a name and
// an IP address, or two names, lead to the same server.
func OnOperatorServers(hosts, operator []string) bool {
	return slices.ContainsFunc(hosts, func(h string) bool {
		n := NormalHost(h)
		return slices.ContainsFunc(operator, func(o string) bool { return NormalHost(o) == n })
	})
}
