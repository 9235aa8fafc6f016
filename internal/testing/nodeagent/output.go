package nodeagent

import "io"

// PrefixLines is a Config.Output that sends every sidecar's log to w, each write (a sidecar writes
// whole lines) prefixed with prefix and the pod's name.
func PrefixLines(w io.Writer, prefix string) func(pod string) io.Writer {
	return func(pod string) io.Writer { return &prefixed{prefix: prefix + pod + ": ", w: w} }
}

type prefixed struct {
	prefix string
	w      io.Writer
}

func (p *prefixed) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
