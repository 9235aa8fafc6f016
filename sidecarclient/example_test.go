package sidecarclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// An app holding a Try-mode lock: acquire with a bounded wait, pass the fencing token to the
// protected resource, stop at the first "lost" notice, and release that grant by its token.
func ExampleClient_Acquire() {
	ctx := context.Background()
	socket := os.Getenv(sidecarclient.EnvSocket) // set by the sidecar injector
	if socket == "" {
		socket = sidecarclient.SocketPath
	}
	c := sidecarclient.New(socket)

	st, err := c.Acquire(ctx, "billing-export", 30*time.Second)
	var apiErr *sidecarclient.Error
	switch {
	case errors.Is(err, sidecarclient.ErrLocked) && errors.As(err, &apiErr) && apiErr.Lock != nil:
		fmt.Println("held by", apiErr.Lock.Holder, "- try again later")
		return
	case errors.Is(err, sidecarclient.ErrAcquiring), errors.Is(err, sidecarclient.ErrHeldByPod):
		fmt.Println("another process of this pod has it or is getting it - try again later")
		return
	case err != nil:
		fmt.Println("acquire:", err)
		return
	}
	// Only now is the lock ours: st.Granted() holds.
	fmt.Println("holding with fencing token", st.Token) // send it with every write you protect
	// Release this grant only: if it ended and another process of the pod was granted the lock
	// since, the sidecar leaves that grant alone (ErrTokenMismatch).
	defer c.Release(context.WithoutCancel(ctx), "billing-export", st.Token)

	events, errs := c.Events(ctx)
	for ev := range events {
		if ev.Type == sidecarclient.EventLost && ev.LockID == "billing-export" {
			fmt.Println("lost:", ev.Reason)
			return
		}
	}
	fmt.Println("event stream ended; assume the lock is lost:", <-errs)
}
