package api_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-dev/baton/sidecar/api"
)

// An app holding a Try-mode lock: acquire with a bounded wait, pass the fencing token to the
// protected resource, and stop at the first "lost" notice.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c := api.NewClient(api.SocketPath)

	st, err := c.Acquire(ctx, "billing-export", 30*time.Second)
	var apiErr *api.Error
	switch {
	case errors.Is(err, api.ErrLocked) && errors.As(err, &apiErr) && apiErr.Lock != nil:
		fmt.Println("held by", apiErr.Lock.Holder, "- try again later")
		return
	case err != nil:
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("holding with fencing token", st.Token) // send it with every write you protect

	events, errs := c.Events(ctx)
	for ev := range events {
		if ev.Type == api.EventLost && ev.LockID == "billing-export" {
			fmt.Println("lost:", ev.Reason)
			return
		}
	}
	fmt.Println("event stream ended; assume the lock is lost:", <-errs)
}

// Serving the API in the sidecar, for some Service implementation svc.
func ExampleNewHandler() {
	var svc api.Service // the sidecar's lock holder
	h, err := api.NewHandler(svc, api.WithKeepAlive(15*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := api.ListenUnix(context.Background(), api.SocketPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	_ = srv.Serve(ln)
}
