package watcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrorClass is what the loop needs to know about an error: not its text, only
// which way to go next.
type ErrorClass int

const (
	// NoError: the request or stream ended normally.
	NoError ErrorClass = iota
	// Canceled: our own context ended; the loop stops.
	Canceled
	// Expired: the resourceVersion we asked for is gone from the server's
	// history (reason Expired or Gone, or HTTP 410 with a reason client-go
	// does not know; an expired continue token too). Only a fresh LIST can
	// resynchronise us.
	Expired
	// TooLargeRV: the server has not caught up with the resourceVersion we
	// asked for (a lagging watch cache). Asking for "latest" works.
	TooLargeRV
	// Throttled: HTTP 429; the server may say how long to wait (Retry-After).
	Throttled
	// Denied: HTTP 401 or 403. Credentials or RBAC are wrong; retrying will not
	// help until someone fixes them, so the loop logs it loudly and backs off.
	Denied
	// Refused: HTTP 400, 405 or 422, the server does not accept the request as
	// made: for a WatchList, a server without that feature.
	Refused
	// Transient: anything else — connection refused or reset, a cut stream,
	// 5xx, a timeout, a stream we could not parse. Retry the same step.
	Transient
)

func (c ErrorClass) String() string {
	return [...]string{"none", "canceled", "expired", "too-large-rv", "throttled", "denied", "refused", "transient"}[c]
}

// Classify sorts err into an ErrorClass. retryAfter is the delay the server
// asked for, if any.
func Classify(err error) (class ErrorClass, retryAfter time.Duration) {
	if err == nil {
		return NoError, 0
	}
	if errors.Is(err, context.Canceled) {
		return Canceled, 0
	}
	if errors.As(err, new(*UnexpectedErrorObject)) {
		return Transient, 0 // whatever it says
	}
	if s, ok := apierrors.SuggestsClientDelay(err); ok {
		retryAfter = time.Duration(s) * time.Second
	}
	switch {
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return Expired, 0
	case isTooLargeRV(err):
		return TooLargeRV, retryAfter
	case apierrors.IsTooManyRequests(err):
		return Throttled, retryAfter
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return Denied, 0
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err), apierrors.IsMethodNotSupported(err):
		return Refused, 0
	}
	return Transient, retryAfter
}

// isTooLargeRV is client-go's Reflector's isTooLargeResourceVersionError:
// the Status's cause, or (servers before the cause) a timeout whose
// message says so. As for Expired, words alone decide nothing: a 500 or a
// proxy's error quoting them is an error like any other.
func isTooLargeRV(err error) bool {
	return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) ||
		apierrors.IsTimeout(err) && strings.Contains(err.Error(), "Too large resource version")
}

// serverStarting reports whether err is kube-apiserver's word that it, or
// its watch cache, has just started, so that the cache's history begins
// at the resourceVersion it started at: a WATCH from an older one meets 410
// as soon as anything was written meanwhile. It says so in two ways
// (k8s.io/apiserver): 503 "the request has been made before all known HTTP
// paths have been installed" (notfoundhandler: the process is still
// installing its API groups, a CRD's among them) and 429 "storage is
// (re)initializing" (cacher/ready.go: the watch cache is listing from
// etcd). Neither has a cause or reason of its own: the text is all there is.
func serverStarting(err error) bool {
	if err == nil || errors.As(err, new(*UnexpectedErrorObject)) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "storage is (re)initializing") ||
		strings.Contains(msg, "before all known HTTP paths have been installed")
}

// UnexpectedErrorObject is an ERROR event whose object is not a Status
// (apierrors.FromObject's rule): an error of its own, which client-go's
// Reflector retries, whatever words the object holds.
type UnexpectedErrorObject struct {
	Object string // as the stream carried it, cut short
	Err    error  // FromObject's
}

func (e *UnexpectedErrorObject) Error() string {
	return fmt.Sprintf("watch ERROR event without a Status (%v): %s", e.Err, e.Object)
}
