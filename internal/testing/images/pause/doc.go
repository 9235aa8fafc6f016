// Package pause is the pod sandbox's pause process: PID 1 of a pod whose containers share a PID
// namespace. It does nothing but wait: it reaps every child that exits (orphans of the pod's
// containers are re-parented to it) so no zombie is left, and it exits with status 0 at SIGINT
// or SIGTERM, which is how the runtime stops the sandbox. Its command, built into the image
// baton.local/pause, is hack/pause.
//
// What it does not do: forward signals to other processes, log, or notice anything but those
// three signals. Outside PID 1 of a namespace it reaps only its own children, and it has none.
package pause
