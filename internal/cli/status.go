package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// status prints the sidecar's locks as a table or as JSON.
func (p *program) status(ctx context.Context, args []string) (int, error) {
	fs := newFlagSet("status")
	socket := fs.String("socket", "", "the sidecar's API socket")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseFlags(fs, "status", args, false); err != nil {
		return 0, err
	}
	path := p.socketPath(*socket)
	if err := checkSocket("status", path, " (or give --socket / BATON_SOCKET)"); err != nil {
		return 0, err
	}
	locks, err := sidecarclient.New(path).Locks(ctx)
	if err != nil {
		return ExitFailure, sidecarError(path, err)
	}
	if locks == nil {
		locks = []sidecarclient.LockStatus{}
	}
	if *asJSON {
		enc := json.NewEncoder(p.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Locks []sidecarclient.LockStatus `json:"locks"`
		}{locks}); err != nil {
			return ExitFailure, fmt.Errorf("write output: %w", err)
		}
		return ExitOK, nil
	}
	writeTable(p, locks)
	return ExitOK, nil
}

func writeTable(p *program, locks []sidecarclient.LockStatus) {
	tw := tabwriter.NewWriter(p.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCK\tSTATE\tTOKEN\tHOLDER\tPOSITION\tLEASE LEFT")
	for _, l := range locks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", l.LockID, l.State,
			orDash(l.Token != 0, strconv.FormatInt(l.Token, 10)),
			orDash(l.Holder != "", l.Holder),
			orDash(l.QueuePosition != 0, strconv.Itoa(l.QueuePosition)),
			orDash(l.State == sidecarclient.StateHeld && l.LeaseRemainingMs > 0, leaseLeft(l.LeaseRemainingMs)))
	}
	_ = tw.Flush()
}

func orDash(ok bool, s string) string {
	if !ok {
		return "-"
	}
	return s
}

// leaseLeft renders milliseconds as a short duration: 12.3s, 1m30s.
func leaseLeft(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// sidecarError explains a failed API call.
func sidecarError(path string, err error) error {
	var ae *sidecarclient.Error
	if errors.As(err, &ae) {
		return fmt.Errorf("the sidecar refused: %w", err)
	}
	if path == "" {
		return fmt.Errorf("cannot reach the sidecar (is it running?): %w", err)
	}
	return fmt.Errorf("cannot reach the sidecar at %s (is it running?): %w", path, err)
}

// onlyLock returns the pod's only declared lock, for a command (cmd) given no --lock; several
// locks are a usage error that says which to name (what).
func onlyLock(ctx context.Context, c *sidecarclient.Client, path, cmd, what string) (string, int, error) {
	ls, err := c.Locks(ctx)
	if err != nil {
		return "", ExitFailure, sidecarError(path, err)
	}
	var ids []string
	for _, l := range ls {
		ids = append(ids, l.LockID)
	}
	if len(ids) != 1 {
		return "", 0, usagef(cmd, "--lock is required: the pod declares %d locks (%s); name %s", len(ids), strings.Join(ids, ", "), what)
	}
	return ids[0], 0, nil
}
