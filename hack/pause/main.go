// Command pause is the pod sandbox's pause process (see package pause), the entrypoint of the
// image baton.local/pause. It exits 0 at SIGINT or SIGTERM and takes no arguments.
package main

import (
	"os"

	"github.com/baton-dev/baton/internal/testing/images/pause"
)

func main() {
	sigs := make(chan os.Signal, 16)
	pause.Notify(sigs)
	pause.Run(sigs, func() { pause.Reap() })
}
