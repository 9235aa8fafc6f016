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
// protected resource, and stop at the first "lost" notice.
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
	case err != nil:
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println("holding with fencing token", st.Token) // send it with every write you protect

	events, errs := c.Events(ctx)
	for ev := range events {
		if ev.Type == sidecarclient.EventLost && ev.LockID == "billing-export" {
			fmt.Println("lost:", ev.Reason)
			return
		}
	}
	fmt.Println("event stream ended; assume the lock is lost:", <-errs)
}
