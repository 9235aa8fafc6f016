package sidecarapi_test

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/sidecarclient"
)

// Serving the API in the sidecar, for some Service implementation svc.
func ExampleNewHandler() {
	var svc sidecarapi.Service // the sidecar's lock holder
	h, err := sidecarapi.NewHandler(svc, sidecarapi.WithKeepAlive(15*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := sidecarapi.ListenUnix(context.Background(), sidecarclient.SocketPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := sidecarapi.NewServer(h, sidecarapi.WithMaxConns(32))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = srv.Serve(ln)
}
