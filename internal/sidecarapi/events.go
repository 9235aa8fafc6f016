package sidecarapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// sseWriteTimeout bounds each write to an event stream, so a client that stopped reading cannot
// hold the handler forever.
const sseWriteTimeout = 10 * time.Second

// events streams the Service's push notices as Server-Sent Events until the client goes away or
// the subscription closes.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	// A body (none is expected) is read first, within the server's read timeout: an unread body
	// would keep the server from noticing that the client went away.
	if aerr := drainBody(w, r); aerr != nil {
		writeError(w, aerr)
		return
	}
	ch, cancel := h.svc.Subscribe()
	defer cancel()

	rc := http.NewResponseController(w)
	send := func(chunk string) bool {
		// Not every writer supports deadlines (e.g. httptest); the stream works without them.
		if err := rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			h.log.V(1).Info("Cannot set write deadline on event stream", "err", err.Error())
		}
		if _, err := io.WriteString(w, chunk); err != nil {
			h.log.V(1).Info("Event stream client went away", "err", err.Error())
			return false
		}
		if err := rc.Flush(); err != nil {
			h.log.V(1).Info("Cannot flush event stream", "err", err.Error())
			return false
		}
		return true
	}
	w.WriteHeader(http.StatusOK)
	// An opening comment sends the headers at once, so the client knows it is subscribed.
	if !send(": subscribed\n\n") {
		return
	}
	tick := time.NewTicker(h.opts.keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if !send(": keepalive\n\n") {
				return
			}
		case ev, ok := <-ch:
			if !ok {
				h.log.V(1).Info("Event subscription closed; ending event stream")
				return
			}
			chunk, err := formatEvent(ev)
			if err != nil {
				// Only a time outside years 0-9999 fails; a lost-lock notice must still go out.
				h.log.Error(err, "Cannot encode event time; sending the event without it", "type", ev.Type, "lockID", ev.LockID)
				ev.Time = time.Time{}
				if chunk, err = formatEvent(ev); err != nil {
					continue
				}
			}
			if !send(chunk) {
				return
			}
		}
	}
}

// formatEvent renders one event in SSE framing. JSON never contains raw newlines, so the data is
// one line; the event name loses any line breaks so it cannot inject fields.
func formatEvent(ev sidecarclient.Event) (string, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return "", err
	}
	name := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, string(ev.Type))
	if name == "" {
		name = "message"
	}
	return "event: " + name + "\ndata: " + string(data) + "\n\n", nil
}
