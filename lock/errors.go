package lock

import "errors"

var (
	// ErrLocked is returned by TryAcquire when another owner holds the lock or other waiters are
	// ahead in its queue.
	ErrLocked = errors.New("lock: held by another owner or others are queued ahead")
	// ErrAlreadyHeld is returned when a Locker is asked for a lock it already holds.
	ErrAlreadyHeld = errors.New("lock: already held by this locker")
	// ErrNotHolder is returned by Revoke when the given token is not the lock's current grant.
	ErrNotHolder = errors.New("lock: token is not the current holder's")

	// ErrLeaseExpired is the loss reason when the holder could not renew in time and fenced itself.
	ErrLeaseExpired = errors.New("lock: lease expired before it could be renewed")
	// ErrRevoked is the loss reason when an operator revoked the grant.
	ErrRevoked = errors.New("lock: grant revoked")
	// ErrOwnershipLost is the loss reason when the owner record no longer names this grant.
	ErrOwnershipLost = errors.New("lock: owner record no longer names this grant")
	// ErrReleased is the reason reported by a lease its holder released.
	ErrReleased = errors.New("lock: released")
	// ErrInvalidLockID is returned for a lock ID that is empty, too long or not printable text.
	ErrInvalidLockID = errors.New("lock: invalid lock ID")
	// ErrInvalidOption is returned by New for options that break the lock's timing rules.
	ErrInvalidOption = errors.New("lock: invalid option")
)
