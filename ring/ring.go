// Package ring keeps the membership of a sharded controller's replicas on
// Leases, Kubernetes' own primitive for it: each replica holds one Lease in
// the ring's namespace and renews it; the live members are the replicas whose
// Lease keeps being renewed. Package shard turns the members into each one's
// slots; the same members give every replica the same answer. With
// Config.OnClaims the members also claim their slots on their Leases and hand
// them over, fenced (handoff.go).
//
//	Lease <ring>.<identity>   labels: rawwatch.example.com/ring=<ring>
//	  holderIdentity: <identity>, leaseDurationSeconds, acquireTime, renewTime
//	  annotations: rawwatch.example.com/scheme (how it divides: shard.Scheme);
//	  with the handoff: rawwatch.example.com/slots (claimed),
//	    rawwatch.example.com/covers (listed and watched by its cache),
//	    rawwatch.example.com/covers-since, rawwatch.example.com/synced-to
//	    (the resourceVersions of that list, and where the cache stands),
//	    rawwatch.example.com/pending (claimed, not confirmed yet),
//	    rawwatch.example.com/given (slots let go, by the member named to
//	    take them: custody, handoff.go), rawwatch.example.com/holds (slots
//	    it holds deletions of); rawwatch.example.com/draining (handing its
//	    slots over before it leaves); rawwatch.example.com/leaving (left
//	    cleanly: its value is the renewTime written with it)
//
// A Lease is the member its name says (a ring's name has no dot), whatever
// holder it names. A member, every RenewPeriod:
//   - renews its Lease, writing back whatever a hand changed;
//   - lists the ring's Leases, and takes as live every Lease it saw renewed
//     (a fresh renewTime: a label by anyone else, or a saved copy
//     re-applied, is no renewal) within the lease duration that holder wrote
//     (at most leaseBelief times its own), on its own clock; no clock is
//     compared with another machine's (liveness.go has the rules);
//   - if it is the first live member, collects the Leases of members dead for
//     three of their lease durations.
//
// A member that leaves cleanly first drains (Drain: its Lease marked
// rawwatch.example.com/draining, it has no share, and hands each slot over
// by the usual handoff), then marks its Lease leaving and deletes it, so the
// others count it out at their next list; the slots it gave stay named on
// the mark until their new owners confirm them.
//
// The fence: a member that cannot renew counts itself out LeaseDuration minus
// RenewPeriod after it sent its last successful renewal, on a timer of its
// own, whatever its loop is doing, and its gate admits nothing past that
// instant (Admits, OnDeadline); the others count it out only LeaseDuration
// (rounded up to a second) after they saw that renewal. So it never goes on
// believing it owns what the others hand to someone else. A join or a clean
// leave is seen within a RenewPeriod and a request; a death within the lease
// duration plus a RenewPeriod.
//
// Rare cases: a Lease that vanishes unmarked was deleted by hand, and counts
// as live for its lease duration; while a Lease of another scheme (a rolling
// update that changes the hash, the slots or the assignment) lives, nobody
// claims a free slot; a failing Lease API leaves the view as it was, retried
// every RenewPeriod, never faster. docs/sharding.md has the bounds, and
// model_test.go the model that holds them.
package ring

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"rawwatch/observe"
	"rawwatch/shard"
)

// errForeignWriter: our own Lease was renewed by someone else.
var errForeignWriter = errors.New("another process renews this member's Lease")

// errLeaseDeleted: our Lease, which claimed slots, was deleted (by hand).
var errLeaseDeleted = errors.New("this member's Lease was deleted under it")

// Label marks a Lease as a member of the ring named by its value.
const Label = "rawwatch.example.com/ring"

// AnnotationSlots on a member's Lease lists the slots it claims
// (shard.SlotSet's text: "0-12,40").
const AnnotationSlots = "rawwatch.example.com/slots"

// AnnotationCovers on a member's Lease lists the slots its cache covers
// (Config.Covers): a slot is handed over to it only once it is there.
const AnnotationCovers = "rawwatch.example.com/covers"

// AnnotationCoversSince and AnnotationSyncedTo on a member's Lease give the
// resourceVersion of the list since which its cache covers those slots
// without a gap, and the one the cache is synced to (Cover).
const (
	AnnotationCoversSince = "rawwatch.example.com/covers-since"
	AnnotationSyncedTo    = "rawwatch.example.com/synced-to"
)

// AnnotationPending on a member's Lease lists the claimed slots it has
// not confirmed yet (Claims.Pending); AnnotationGiven, the slots it let go,
// by the member it gave them to, until that member confirmed them
// (Claims.Given): "<identity>=<slots>;…"; AnnotationHolds, the slots it
// holds deletions of without claiming them (Claims.Holding), covered or
// not: a watch that relists keeps its holder's claim to go first.
const (
	AnnotationPending = "rawwatch.example.com/pending"
	AnnotationGiven   = "rawwatch.example.com/given"
	AnnotationHolds   = "rawwatch.example.com/holds"
)

// AnnotationLeaving on a member's Lease says that its holder left cleanly:
// it admits nothing any more and claims nothing; the slots it gave
// (AnnotationGiven) stay given until their new owners confirm them. Its
// value is the Lease's renewTime (RFC 3339, microseconds) as the holder
// wrote both in one write, or the collector's (markCollected): a mark of
// any other value (written by hand, or left over from before a renewal)
// counts for nothing. The others count a
// marked Lease out at once, and forget it when it is gone; a Lease that
// vanishes unmarked was deleted by hand, and counts as live until its
// lease runs out (liveness.go).
const AnnotationLeaving = "rawwatch.example.com/leaving"

// AnnotationDraining on a member's Lease says that its holder is leaving
// and hands its slots over first (Member.Drain): it is no member for the
// shares (the others divide the slots without it, and it has no target),
// and its claims stand while it lets them go by the usual handoff. Its value
// is the renewTime written with it, as the leaving mark's: a hand-written
// one counts for nothing, and the holder's next renewal erases it.
const AnnotationDraining = "rawwatch.example.com/draining"

// AnnotationScheme on a member's Lease names how it divides the objects
// (shard.Scheme: the hash, the number of slots, the assignment). A Lease
// of another scheme is not a member: while its lease runs, it counts as
// claiming every slot, none confirmed (nobody claims a free slot, nobody
// withdraws one it works). A Lease without it is of legacyScheme.
const AnnotationScheme = "rawwatch.example.com/scheme"

// legacyScheme is the scheme of a Lease that names none: written before
// the annotation existed, it divided as this one did.
const legacyScheme = "fnv1a64/256/rendezvous-bounded"

// mark is the value of AnnotationLeaving that marks a Lease renewed at t.
func mark(t time.Time) string { return t.UTC().Format(metav1.RFC3339Micro) }

// markCollected is the value of AnnotationLeaving with which the collector
// marks a dead member's Lease renewed at t: apart from its holder's own
// (mark), so that a mark valued as the collector writes it, read with a
// renewal, is never taken for the holder's leave.
func markCollected(t time.Time) string { return "collected " + mark(t) }

// leavingMarked tells whether l carries a leaving mark bound to its
// renewTime, and whether it is the collector's (markCollected).
func leavingMarked(l *coordinationv1.Lease) (marked, collected bool) {
	v, ok := l.Annotations[AnnotationLeaving]
	if !markBound {
		return ok, false
	}
	if !ok || l.Spec.RenewTime == nil {
		return false, false
	}
	r := l.Spec.RenewTime.Time
	return v == mark(r) || v == markCollected(r), v == markCollected(r)
}

// drainingMarked tells whether l carries its holder's draining mark.
func drainingMarked(l *coordinationv1.Lease) bool {
	v, ok := l.Annotations[AnnotationDraining]
	return ok && l.Spec.RenewTime != nil && v == mark(l.Spec.RenewTime.Time)
}

// recordOf is the holder's record of l, as client-go's leader election
// compares it: who holds it, since when, when it last renewed it, how many
// times it changed hands. Only a write of the holder changes it; a label
// or an annotation written by anyone else does not.
func recordOf(l *coordinationv1.Lease) string {
	var b strings.Builder
	if h := l.Spec.HolderIdentity; h != nil {
		b.WriteString(strconv.Quote(*h))
	}
	for _, t := range []*metav1.MicroTime{l.Spec.AcquireTime, l.Spec.RenewTime} {
		b.WriteByte('|')
		if t != nil {
			b.WriteString(mark(t.Time))
		}
	}
	b.WriteByte('|')
	if n := l.Spec.LeaseTransitions; n != nil {
		b.WriteString(strconv.Itoa(int(*n)))
	}
	return b.String()
}

// leaseDurationOf is the lease duration l's holder wrote (0: none).
func leaseDurationOf(l *coordinationv1.Lease) time.Duration {
	if s := l.Spec.LeaseDurationSeconds; s != nil && *s > 0 {
		return time.Duration(*s) * time.Second
	}
	return 0
}

// formatGiven and parseGiven write and read AnnotationGiven.
func formatGiven(given shard.SlotSet, to *[shard.Slots]string) string {
	by := map[string]shard.SlotSet{}
	for _, i := range given.List() {
		by[to[i]] = by[to[i]].With(i)
	}
	var parts []string
	for id, slots := range by {
		if id != "" {
			parts = append(parts, id+"="+slots.String())
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ";")
}

func parseGiven(s string) (map[string]shard.SlotSet, error) {
	given := map[string]shard.SlotSet{}
	for _, part := range strings.Split(s, ";") {
		if part == "" {
			continue
		}
		id, slots, ok := strings.Cut(part, "=")
		set, err := shard.ParseSlotSet(slots)
		if !ok || id == "" || err != nil {
			return nil, fmt.Errorf("given slots %q: want <identity>=<slots>", part)
		}
		given[id] = given[id].Union(set)
	}
	return given, nil
}

// Cover is what a member's cache covers: its slots, the resourceVersion of
// the list since which it has followed them without a gap (Since), and the
// one it is synced to (Synced, read before Since). 0: unknown.
type Cover struct {
	Slots         shard.SlotSet
	Since, Synced uint64
}

// and is what both c and d say is covered: the slots both cover, since the
// later list, synced to the earlier position (unknown if either is).
func (c Cover) and(d Cover) Cover {
	known := func(rv uint64) bool { return rv != 0 && rv != math.MaxUint64 }
	if !known(c.Since) || !known(d.Since) || !known(c.Synced) || !known(d.Synced) {
		return Cover{Slots: c.Slots.And(d.Slots)}
	}
	return Cover{Slots: c.Slots.And(d.Slots), Since: max(c.Since, d.Since), Synced: min(c.Synced, d.Synced)}
}

// Sweeps is the slots swept since Claims.Sweep asked, with, by slot, the
// resourceVersion the sweep listed at and the newest among the slot's
// objects it listed.
type Sweeps struct {
	Slots      shard.SlotSet
	At, Newest [shard.Slots]uint64
}

// Defaults of Config.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewPeriod   = 2 * time.Second
)

// MinLeaseDuration and MinRenewPeriod bound the durations a ring runs on:
// a Lease says its duration in whole seconds, and each renew period every
// member writes its Lease and lists the ring's.
const (
	MinLeaseDuration = time.Second
	MinRenewPeriod   = 100 * time.Millisecond
)

// MaxLeaseDuration bounds the lease duration: a Lease says it in seconds
// in an int32, and the waits derived from it (CollectWithin, four times it
// believed) count nanoseconds in an int64. A dead member is out only after
// it: a day already stalls a ring for a day.
const MaxLeaseDuration = 24 * time.Hour

// CheckDurations tells why a ring cannot run on lease duration lease and
// renew period renew, if it cannot: the renew period must be at most a
// third of the lease duration (a member fences itself lease − renew after
// its last renewal, and must get two tries in before), neither below its
// minimum, and the lease duration at most MaxLeaseDuration.
func CheckDurations(lease, renew time.Duration) error {
	switch {
	case lease < MinLeaseDuration:
		return fmt.Errorf("lease duration %v: at least %v (a Lease says whole seconds)", lease, MinLeaseDuration)
	case lease > MaxLeaseDuration:
		return fmt.Errorf("lease duration %v: at most %v (a dead member is out only after it; a Lease says it in an int32 of seconds)", lease, MaxLeaseDuration)
	case renew < MinRenewPeriod:
		return fmt.Errorf("renew period %v: at least %v (each one, every member writes its Lease and lists the ring's)", renew, MinRenewPeriod)
	case 3*renew > lease:
		return fmt.Errorf("renew period %v: at most a third of the lease duration %v (a member fences itself a renew period before its Lease expires, and must get two renewals in before)", renew, lease)
	}
	return nil
}

// Config says which ring to join, as whom.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// Ring names the ring: replicas of one controller share it.
	Ring string
	// Identity names this member; unique in the ring (the pod's name).
	Identity string
	// LeaseDuration: a member whose Lease was not renewed for this long is
	// out. RenewPeriod: how often Leases are renewed and listed. Defaults
	// DefaultLeaseDuration and DefaultRenewPeriod.
	LeaseDuration, RenewPeriod time.Duration
	// Now is the clock; default Clock.Now. Its readings carry the
	// monotonic clock (time.Now's do): every duration the ring measures is
	// between two of its own readings, never against another machine's.
	Now func() time.Time
	// Wall is the wall clock, that the member's renewTimes are read from;
	// unset, the wall reading of Now's own readings.
	Wall func() time.Time
	// Boot is a clock that counts a system suspend and is never stepped,
	// read beside Now for the member's own fence (fenceClock); unset, the
	// system's CLOCK_BOOTTIME with the real clock, none with a Now or a
	// Clock of a test's. Tests set it to show a suspend: Now stands still
	// while Boot runs on.
	Boot func() time.Time
	// Clock makes Run's ticker and fence timer; default the real clock
	// (tests move a fake one).
	Clock clock.WithTicker
	// OnDeadline, when set, hears the fence deadline (on the member's fence
	// clock, Member.Now) whenever it moves: the instant from which this member may admit no
	// reconcile (Admits), the zero time when it has no lease at all. Called
	// on the member's goroutines, before the claims that rely on it are
	// handed to OnClaims, and, when it is extended, after the member checked
	// it had not passed.
	OnDeadline func(time.Time)

	// OnClaims, when set, makes the members divide the shard slots (the
	// handoff): it is called on the member's goroutine whenever its Claims
	// change, and must return once they are in effect (new reconciles of a
	// slot no longer Working refused, those of a newly Working slot allowed)
	// without waiting for reconciles to end. Busy reports the slots with a
	// reconcile in flight or a deletion not yet handled, and those with a
	// deletion whose handling failed, waiting for a retry.
	OnClaims func(Claims)
	Busy     func() (busy, failing shard.SlotSet)
	// Held, optional with OnClaims, reports the slots whose deletions this
	// member holds: heard of in a slot it watches and does not claim, kept
	// for when it does (Claims.Holding).
	Held func() shard.SlotSet
	// Covers reports the slots whose every deletion this member hears of
	// from now on (its watcher listed them and watches them), and where
	// its cache stands; Swept, of the slots Claims.Sweep named, those swept
	// since. Both go with OnClaims, or neither: then a slot is let go as
	// soon as nothing of it is in flight (no sweeps).
	Covers func() Cover
	Swept  func() Sweeps
	// HandoffTimeout bounds how long a slot being let go waits for its new
	// owner to cover it; then it is swept and let go anyway (a deletion
	// made between that sweep and the new owner's list is then seen by
	// neither). Default 4 × LeaseDuration: longer than a watcher's backoff
	// cap plus a list.
	HandoffTimeout time.Duration
	// Observer hears MembersChanged and ClaimsChanged. Optional.
	Observer observe.Observer
}

// The events a member reports to Config.Observer.
type (
	// MembersChanged: the live members this member sees changed.
	MembersChanged struct {
		Identity        string // this member
		Members, Before []string
	}
	// ClaimsChanged: this member's claims changed (Fenced: because it
	// could not renew its Lease in time).
	ClaimsChanged struct {
		Identity string
		Claims   Claims
		Before   Claims
		Fenced   bool
		Members  []string
	}
)

func (m *Member) observe(e observe.Event) {
	if m.cfg.Observer != nil {
		m.cfg.Observer.Observe(e)
	}
}

// A Member is this replica's place in the ring.
type Member struct {
	cfg Config

	// step serializes the steps of the claims: the loop's (update) and
	// the fence timer's (fenceIfPast); held across OnClaims.
	step sync.Mutex
	// rearm wakes the fence timer when renewed moves.
	rearm chan struct{}

	// fence is the clock of the member's own fence (Now): renewed, the
	// deadline, the gate's readings.
	fence fenceClock

	mu      sync.Mutex
	seen    map[string]observed // by name, the ring's other Leases
	past    map[string]forgotten
	longest time.Duration // the longest lease duration read on any (ours included)
	renewed time.Time     // when our last successful renewal was sent (fence clock)
	members []string      // the live members, sorted
	changed chan struct{} // closed and replaced when members change

	// wrote is the renewTime our last successful renewal wrote, tried
	// those of the attempts since (any may have been written though it
	// failed, e.g. timed out after the server wrote it); lookOK, whether
	// the last list of the ring's Leases succeeded (the member's goroutine
	// only).
	wrote  time.Time
	tried  []time.Time
	lookOK bool
	// lookedAt is when the last successful list of the ring's Leases was
	// made: while lists fail, the others stand as they stood then.
	lookedAt time.Time
	// lookedAtFence is the same instant on the fence's clock, which counts
	// a system suspend (a blind stretch the monotonic clock cannot see).
	lookedAtFence time.Time
	// looks counts the successful lists of the ring's Leases.
	looks int
	// quietUntil: our Lease was deleted under us; the one re-created
	// claims nothing until then, and only watches the slots given to it
	// (lostLease).
	quietUntil time.Time
	lost       bool // since lostLease, not re-created yet
	// unseenUntil: until then, a Lease this member never read may be
	// working; it claims no free slot (sight, wroteLease). wroteOnce:
	// its Lease was written at least once.
	unseenUntil time.Time
	wroteOnce   bool
	// ownSeen: the last list showed our own Lease.
	ownSeen bool
	// acquired is the acquireTime our renewals write: a new one (a stamp)
	// whenever this process creates, adopts or takes back its Lease, so
	// that the others judge its renewTimes apart from any other
	// process's, and from those a copy brought back (ledger).
	acquired time.Time
	// foreignLogged: the Leases of another scheme logged, with it.
	logMu         sync.Mutex
	foreignLogged map[string]string
	// collecting: the dead Lease this member marked leaving to delete it,
	// and when; collected, when collect last made a request (collect).
	collecting              string
	collectingAt, collected time.Time
	// found is our own Lease as we found it not written by us (before we
	// ever wrote it, or since a write we do not know: a previous process
	// of ours, another one with our identity, an etcd restore): adopted
	// only once its holder's record has not moved for the lease duration
	// written on it, or ours if longer (stillFor).
	found *stillness

	// draining: Drain was called; the member has no share and hands its
	// slots over (under mu).
	draining bool
	// owed: slots it withdrew (another Lease claimed them too) and has not
	// claimed again, that no other live member works: their deletions are
	// its, whether its watch brought them yet or not (Claims.Holding).
	owed shard.SlotSet
	// sawWorked, by identity: the slots another member claims confirmed
	// that were its share at some list since it claimed them (update).
	sawWorked map[string]shard.SlotSet

	// The handoff (the member's goroutine only, but claims is read by Claims).
	claims    Claims
	published shard.SlotSet // what this tick's renewal wrote
	confirmed bool          // this tick: a renewal, then a list, both succeeded
	// releasingSince is when each slot became Releasing (zero: it is not);
	// ownerOf, whom the last step's membership gave each slot to.
	releasingSince [shard.Slots]time.Time
	// uncoveredSince is since when each slot held (Claims.Holding) has
	// not been covered by our cache (zero: covered, or not held).
	uncoveredSince [shard.Slots]time.Time
	ownerOf        [shard.Slots]string
	// givenTo names the member each Given slot went to, givenAt when;
	// handed, the Given slots let go handed over (View.Handed).
	givenTo [shard.Slots]string
	givenAt [shard.Slots]time.Time
	// giftSeen: the Given slots whose new owner's Lease a list read since
	// the gift not giving them on (AnnotationGiven).
	giftSeen shard.SlotSet
	handed   shard.SlotSet
	// Lingering (Claims.Lingering): published is the cover the last
	// renewal wrote; withdrawn, the slots it stopped covering since the
	// last list; withdrawals, each withdrawal with the others' renewal
	// counts at the list after it was written.
	publishedCover shard.SlotSet
	withdrawn      shard.SlotSet
	withdrawals    []withdrawal
}

type withdrawal struct {
	slots   shard.SlotSet
	renewed map[string]int // by Lease name: observed.renewals then
}

// observed is what this member knows of one Lease of the ring (Member.seen
// holds them by the Lease's name).
type observed struct {
	id     string // the member it is: its name says (identityOf)
	rv     string // its resourceVersion, as last listed
	record string // its holder's record (recordOf), as last listed
	// renewTime and acquired are its renewTime and acquireTime, as last
	// listed; ledger, the records read on it (fresh: a renewal writes one
	// never read).
	renewTime, acquired time.Time
	ledger              ledger
	// bound is the acquisition whose renewals its annotations are taken
	// from, and a leaving mark binds to; boundUntil, until when its owner
	// may work, by what this observer read (sight).
	bound, boundUntil time.Time
	// lease is the lease duration its holder wrote with the record (the
	// observer's own when it wrote none); at, when we read its last
	// renewal (zero: none, a copy); hidden, when we read a move that may
	// hide one (hides); renewals, how many renewals we read.
	lease      time.Duration
	at, hidden time.Time
	renewals   int
	claims     shard.SlotSet // the slots its Lease claims
	pending    shard.SlotSet // of those, the ones not confirmed yet
	covers     Cover         // what its cache covers
	// givenMe: the slots it gave this member; givenOthers, to others.
	givenMe, givenOthers shard.SlotSet
	// holds: the slots it holds deletions of (AnnotationHolds).
	holds shard.SlotSet
	// leaving: marked AnnotationLeaving by its holder; gone: no longer
	// listed (deleted by hand), standing as last seen until its lease
	// runs out; foreign: of another scheme (AnnotationScheme); stray: its
	// holder is not the member its name says (cleared or changed by hand,
	// or a copy under another name).
	// collected: the leaving mark is the collector's (markCollected).
	leaving, gone, foreign, stray, collected bool
	// marked: it carries its holder's leaving mark, counted or not
	// (leaving: counted; sight); doubt: it moved since its last renewal
	// read, by a write that may hide one, so its claims are taken as
	// every slot, none confirmed (sight).
	marked, doubt bool
	// unproven: read at first sight, and no renewal of it since: the
	// slots it gave this member are its custody, watched, but nobody's to
	// claim (sight, peers).
	unproven bool
	// draining: marked AnnotationDraining by its holder: a member that
	// hands its slots over before it leaves (no share of its own).
	draining bool
}

// New returns a member; it joins when Run starts.
func New(cfg Config) (*Member, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Ring == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("ring: Client, Namespace, Ring and Identity are required")
	}
	// The Lease's name, <ring>.<identity>, is read back by splitting at the
	// first dot: a ring name has none, so no two rings' members share one.
	if errs := validation.IsDNS1123Label(cfg.Ring); len(errs) > 0 {
		return nil, fmt.Errorf("ring: ring name %q: %s", cfg.Ring, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(cfg.Ring + "." + cfg.Identity); len(errs) > 0 {
		return nil, fmt.Errorf("ring: identity %q (the Lease is named %s.%s): %s", cfg.Identity, cfg.Ring, cfg.Identity, strings.Join(errs, "; "))
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewPeriod <= 0 {
		cfg.RenewPeriod = DefaultRenewPeriod
	}
	if err := CheckDurations(cfg.LeaseDuration, cfg.RenewPeriod); err != nil {
		return nil, fmt.Errorf("ring: %w", err)
	}
	if (cfg.OnClaims == nil) != (cfg.Busy == nil) {
		return nil, fmt.Errorf("ring: OnClaims and Busy go together")
	}
	if (cfg.Covers == nil) != (cfg.Swept == nil) || cfg.Covers != nil && cfg.OnClaims == nil {
		return nil, fmt.Errorf("ring: Covers and Swept go together, with OnClaims")
	}
	if cfg.Boot == nil && cfg.Clock == nil && cfg.Now == nil {
		cfg.Boot = bootNow
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Now == nil {
		cfg.Now = cfg.Clock.Now
	}
	if cfg.HandoffTimeout <= 0 {
		cfg.HandoffTimeout = 4 * cfg.LeaseDuration
	}
	return &Member{cfg: cfg, fence: fenceClock{now: cfg.Now, wall: cfg.Wall, boot: cfg.Boot}, longest: cfg.LeaseDuration,
		seen: map[string]observed{}, past: map[string]forgotten{}, changed: make(chan struct{}), rearm: make(chan struct{}, 1)}, nil
}

// Members returns the live members, sorted; this one is among them only
// while its renewals succeed.
func (m *Member) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Claims returns where this member stands in the handoff.
func (m *Member) Claims() Claims {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims
}

// Drain begins a clean leave that hands the slots over first: from its
// next renewal on, the member's Lease says it drains (AnnotationDraining),
// the others divide the slots without it, and it lets each of its slots go
// by the usual handoff (Releasing, swept once its new owner covers it,
// given by name until that owner confirms it), handling their deletions
// until then. Run's end then leaves as usual. See Drained.
func (m *Member) Drain() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.draining = true
}

// Drained tells whether a member that drains has handed everything over:
// it claims nothing, names no slot given and not yet confirmed, and is
// given nothing and holds no deletions of a slot nobody works; or no other
// live member is there to take its slots (its leave then lets them go as a
// leave without a drain does).
func (m *Member) Drained() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.claims
	return m.draining && (c.Claimed().Union(c.Given).Union(c.Custody).Union(c.Holding).Empty() || len(m.members) == 0)
}

// Now reads the clock of the member's own fence: the deadline OnDeadline
// hears is on it, and a gate compares the deadline with its readings
// (Admits). It counts a system suspend, which Go's monotonic clock does
// not (fenceClock).
func (m *Member) Now() time.Time { return m.fence.read() }

// fenceAfter is how long after sending its last successful renewal a member
// counts itself out: a RenewPeriod before the others may.
func (m *Member) fenceAfter() time.Duration { return m.cfg.LeaseDuration - m.cfg.RenewPeriod }

// Changed returns a channel closed at the next change of Members.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// leaseName is the name of this member's Lease: <ring>.<identity>.
func (m *Member) leaseName() string { return m.cfg.Ring + "." + m.cfg.Identity }

// identityOf is the identity of the member whose Lease of ring is named
// name: <ring>.<identity>, or <ring>-<identity> as Leases were named before
// the scheme annotation (the ring's label tells the rings apart); else the
// name itself.
func identityOf(ring, name string) string {
	if id, ok := strings.CutPrefix(name, ring+"."); ok && id != "" {
		return id
	}
	if id, ok := strings.CutPrefix(name, ring+"-"); ok && id != "" {
		return id
	}
	return name
}

// Run holds the membership until ctx ends, then leaves (see leave) and
// returns. A timer of its own fences the member at its deadline, whatever
// the loop is doing (a renewal or a list may hang up to a RenewPeriod).
func (m *Member) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithName("ring")
	tick := m.cfg.Clock.NewTicker(m.cfg.RenewPeriod)
	defer tick.Stop()
	fenceCtx, stopFence := context.WithCancel(ctx)
	fenceDone := make(chan struct{})
	go func() { defer close(fenceDone); m.watchFence(fenceCtx, log) }()
	for {
		m.round(ctx, log)
		select {
		case <-ctx.Done():
			stopFence()
			<-fenceDone
			m.leave(log)
			return
		case <-tick.C():
		}
	}
}

// round is one turn of the loop: renew, list, step.
func (m *Member) round(ctx context.Context, log klog.Logger) {
	m.beforeRenew(log)
	sent, renewErr := m.renew(ctx)
	m.renewDone(log, sent, renewErr, ctx.Err() == nil)
	lookErr := m.look(ctx)
	if lookErr != nil && ctx.Err() == nil {
		log.Error(lookErr, "Could not list the ring's Leases")
	}
	m.lookDone(log, lookErr == nil, renewErr == nil)
	if m.lookOK {
		m.collect(ctx, log)
	}
}

// renewDone takes in a renewal's outcome: sent then, it failed with err
// (nil: it succeeded); report: log the failure.
func (m *Member) renewDone(log klog.Logger, sent time.Time, err error, report bool) {
	if err == nil {
		m.extend(log, sent)
		return
	}
	if report {
		log.Error(err, "Could not renew the ring's Lease", "lease", m.leaseName())
	}
	if errors.Is(err, errLeaseDeleted) {
		m.lostLease()
	}
	if errors.Is(err, errForeignWriter) || errors.Is(err, errLeaseDeleted) {
		m.setRenewed(time.Time{}) // out now, not at the fence timer
		m.fenceIfPast(log)
	}
}

// lookDone takes in a list's outcome (ok: it succeeded, and look recorded
// it), after a renewal that succeeded or not, and steps.
func (m *Member) lookDone(log klog.Logger, ok, renewed bool) {
	m.lookOK = ok
	if ok {
		m.looks++
	}
	m.afterLook(log, renewed)
	m.update(log)
}

// collectAfter: a Lease whose holder has not renewed it for this many of
// its lease durations is a dead member's, and collect deletes it.
const collectAfter = 3

// CollectWithin bounds how long after its holder's last renewal the
// Lease of a member that died is deleted, in a ring whose live members
// list every renew period and whose longest lease duration is lease: it
// is seen dead collectAfter lease durations after a list read its last
// renewal, marked at the first member's next collection step (one per
// three renew periods), and deleted a lease duration after the mark, at
// the next step (plus the lists and requests between).
func CollectWithin(lease, renew time.Duration) time.Duration {
	return (collectAfter+1)*written(lease) + 8*renew
}

// written is a lease duration as a Lease carries it: rounded up to a
// second. The others judge the member by it (sight), never by less than
// the duration its fence counts from.
func written(lease time.Duration) time.Duration {
	return (lease + time.Second - 1).Truncate(time.Second)
}

// collect deletes the Lease of a member dead for collectAfter of its lease
// durations, so that dead members' Leases are not listed for ever. Only
// the first live member collects (one collector per ring, unless their
// views differ), one request set per three renew periods at most: it marks
// the Lease leaving, bound to the holder's last renewal, as read by a GET
// (a renewal since makes the UPDATE conflict: the holder lives), and
// deletes it a longest lease duration later (every member's lists read the
// mark meanwhile: they forget it when it is gone), held to the
// resourceVersion last listed (a renewal since makes it fail). A member
// that missed the mark counts the Lease as deleted by hand: it claims
// every slot, none confirmed, for its lease duration (no free slot is
// claimed meanwhile: slower, never unsafe). A holder that comes back finds
// its Lease gone, and re-creates it (errLeaseDeleted). A Lease its holder
// marked leaving and never deleted is deleted at once.
func (m *Member) collect(ctx context.Context, log klog.Logger) {
	now := m.cfg.Now()
	name, o := m.collectable(now)
	if name == "" {
		return
	}
	ctx, cancel := m.request(ctx)
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	var got *coordinationv1.Lease
	if !o.leaving {
		var err error
		if got, err = leases.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return
		}
	}
	switch rv, marked := collection(o, got); {
	case marked != nil:
		if _, err := leases.Update(ctx, marked, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsConflict(err) {
				log.Error(err, "Could not mark a dead member's Lease leaving to delete it", "lease", name)
			}
			return
		}
		m.collecting, m.collectingAt = name, now
	case rv != "":
		err := leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			log.Info("Deleted a dead member's Lease", "lease", name, "notRenewedFor", now.Sub(o.last()).Round(time.Second))
		case apierrors.IsConflict(err):
		default:
			log.Error(err, "Could not delete a dead member's Lease", "lease", name)
		}
	}
}

// collection is what collect writes to a dead member's Lease, last listed
// as o and, unless o is marked leaving, read again as got: delete it,
// held to resourceVersion rv (it is marked, or was never renewed: no mark
// to bind to it), or update it to marked; or nothing (got nil, or renewed
// since).
func collection(o observed, got *coordinationv1.Lease) (rv string, marked *coordinationv1.Lease) {
	switch {
	case o.leaving:
		return o.rv, nil
	case got == nil || recordOf(got) != o.record:
		return "", nil
	case got.Spec.RenewTime == nil:
		return got.ResourceVersion, nil
	}
	if got.Annotations == nil {
		got.Annotations = map[string]string{}
	}
	got.Annotations[AnnotationLeaving] = markCollected(got.Spec.RenewTime.Time)
	return "", got
}

// collectable is the Lease collect works on at now, if any (its name, and
// what the last list showed of it), and notes that it does.
func (m *Member) collectable(now time.Time) (name string, o observed) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.members) == 0 || m.members[0] != m.cfg.Identity || now.Sub(m.collected) < 3*m.cfg.RenewPeriod {
		return "", o
	}
	for n, c := range m.seen {
		if c.gone || now.Sub(c.last()) < collectAfter*c.lease {
			continue
		}
		if c.leaving && n == m.collecting && now.Sub(m.collectingAt) < m.longest {
			continue // marked by us: the others' lists read the mark first
		}
		if name == "" || n < name {
			name, o = n, c
		}
	}
	if name != "" {
		m.collected = now
	}
	return name, o
}

// afterLook: a renewal, then a list that shows our Lease, confirm the claims
// (written, then read); a list that does not show the Lease our renewal
// just wrote finds it deleted under us (lostLease).
func (m *Member) afterLook(log klog.Logger, renewed bool) {
	m.confirmed = renewed && m.lookOK && m.ownSeen
	// (A list that does not show the Lease we wrote before finds it gone
	// too, whether or not this round's renewal went through: a member whose
	// renewals failed worked on to its fence.)
	if m.lookOK && !m.ownSeen && (renewed || !m.wrote.IsZero()) {
		m.lostLease()
		m.setRenewed(time.Time{})
		m.fenceIfPast(log)
	}
}

// lostLease: our Lease was deleted under us. The Lease we re-create claims
// nothing for the longest lease duration we read on the ring (ours or
// another's): an observer whose lists are less than its own lease duration
// apart then reads it before it claims anything, and one that could not
// (blind that long) counts what it saw gone as freshly gone (sight).
func (m *Member) lostLease() {
	m.mu.Lock()
	m.quietUntil = m.cfg.Now().Add(m.longest)
	m.lost = true
	m.mu.Unlock()
}

// wroteLease: a renewal succeeded. If it re-created a Lease lost under us,
// the lease duration of quiet counts from now, when it is there for the
// others to read (counted from the loss, a re-create that failed for a
// lease duration claimed a renew period after it landed).
func (m *Member) wroteLease() {
	m.mu.Lock()
	if m.lost {
		m.quietUntil = m.cfg.Now().Add(m.longest)
		m.lost = false
	}
	if !m.wroteOnce { // a new Lease claims no free slot for a lease duration
		m.wroteOnce = true
		m.unseenUntil = later(m.unseenUntil, m.cfg.Now().Add(m.longest))
	}
	m.mu.Unlock()
}

// sighted records a successful list made at now (m.mu held): see sight.
func (m *Member) sighted(listed map[string]observed, now time.Time) {
	prev, prevF := m.lookedAt, m.lookedAtFence
	m.lookedAt, m.lookedAtFence = now, m.fence.read()
	for _, l := range listed {
		m.longest = max(m.longest, l.lease)
	}
	if sight(m.seen, listed, m.past, now, prev, m.lookedAtFence.Sub(prevF), m.cfg.LeaseDuration) {
		m.unseenUntil = later(m.unseenUntil, now.Add(m.longest))
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// beforeRenew: a member past its fence (resumed from a pause, say) is out
// before it renews; the renewal would otherwise renew the claims it lost.
func (m *Member) beforeRenew(log klog.Logger) {
	if fenceFirst {
		m.fenceIfPast(log)
	}
}

// extend moves the lease on after a successful renewal sent at sent; a
// member whose fence passed while the renewal was in flight fences first
// (the claims it held may be another's by now).
func (m *Member) extend(log klog.Logger, sent time.Time) {
	if fenceFirst {
		m.fenceIfPast(log)
	}
	m.setRenewed(sent)
}

// setRenewed records the last successful renewal's sending (zero: none),
// tells OnDeadline, and rearms the fence timer.
func (m *Member) setRenewed(sent time.Time) {
	m.mu.Lock()
	m.renewed = sent
	m.mu.Unlock()
	if m.cfg.OnDeadline != nil {
		var until time.Time
		if !sent.IsZero() {
			until = sent.Add(m.fenceAfter())
		}
		m.cfg.OnDeadline(until)
	}
	select {
	case m.rearm <- struct{}{}:
	default:
	}
}

// watchFence fences the member when its deadline passes, until ctx ends.
func (m *Member) watchFence(ctx context.Context, log klog.Logger) {
	for {
		m.mu.Lock()
		renewed := m.renewed
		m.mu.Unlock()
		var fire <-chan time.Time
		stop := func() {}
		if !renewed.IsZero() {
			t := m.cfg.Clock.NewTimer(max(0, renewed.Add(m.fenceAfter()).Sub(m.Now())))
			fire, stop = t.C(), func() { t.Stop() }
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-m.rearm:
			stop()
		case <-fire:
			m.fenceIfPast(log)
			select { // wait for the lease to move again
			case <-ctx.Done():
				return
			case <-m.rearm:
			}
		}
	}
}

// fenceIfPast drops every claim (and this member from its members) if its
// fence deadline has passed: OnClaims hears empty claims, and the gate
// cancels the reconciles in flight.
func (m *Member) fenceIfPast(log klog.Logger) {
	m.step.Lock()
	defer m.step.Unlock()
	now := m.Now()
	m.mu.Lock()
	if !fenced(m.renewed, now, m.fenceAfter()) {
		m.mu.Unlock()
		return
	}
	before, renewed := m.claims, m.renewed
	m.claims = Claims{}
	var membersChanged *MembersChanged
	if i := slices.Index(m.members, m.cfg.Identity); i >= 0 {
		live := slices.Delete(slices.Clone(m.members), i, i+1)
		membersChanged = &MembersChanged{Identity: m.cfg.Identity, Members: live, Before: m.members}
		m.members = live
		close(m.changed)
		m.changed = make(chan struct{})
	}
	members := m.members
	m.mu.Unlock()
	if membersChanged != nil {
		m.observe(*membersChanged)
	}
	if before == (Claims{}) {
		return
	}
	log.Info("Fenced: our Lease could not be renewed in time; every claim dropped", "lastRenewal", renewed)
	if m.cfg.OnClaims != nil {
		m.cfg.OnClaims(Claims{})
	}
	m.observe(ClaimsChanged{Identity: m.cfg.Identity, Before: before, Fenced: true, Members: members})
}

// request bounds a ring request by a RenewPeriod, and by the fence deadline
// while it is ahead: the loop is back by the time the member counts itself
// out.
func (m *Member) request(ctx context.Context) (context.Context, context.CancelFunc) {
	timeout := m.cfg.RenewPeriod
	now := m.Now()
	m.mu.Lock()
	if !m.renewed.IsZero() {
		if left := m.renewed.Add(m.fenceAfter()).Sub(now); left > 0 {
			timeout = min(timeout, left)
		}
	}
	m.mu.Unlock()
	return context.WithTimeout(ctx, timeout)
}

// renew creates or renews this member's Lease; it returns when the
// renewal was sent (its lease runs from then: extend).
func (m *Member) renew(ctx context.Context) (time.Time, error) {
	ctx, cancel := m.request(ctx)
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	sent := m.Now()
	got, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{})
	w, err := m.renewal(got, err)
	if err != nil {
		return sent, err
	}
	if w.create {
		_, err = leases.Create(ctx, w.lease, metav1.CreateOptions{})
	} else {
		_, err = leases.Update(ctx, w.lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return sent, err
	}
	m.wroteRenewal(w)
	return sent, nil // sent before the server wrote it: before anyone saw it
}

// A renewal is what one renewal of this member's Lease writes.
type renewal struct {
	lease   *coordinationv1.Lease // to create, or to update (as read, changed)
	create  bool
	stamp   time.Time // its renewTime
	claimed shard.SlotSet
	cover   Cover
}

// renewal decides what a renewal writes, from this member's Lease as a GET
// read it (lease, or the GET's error err): its claims, over whatever the
// Lease says (changing lease); or why it writes nothing.
func (m *Member) renewal(lease *coordinationv1.Lease, err error) (renewal, error) {
	// The renewTime the Lease says is the wall clock's, for its readers
	// (the fence's clock runs ahead of it by the suspends and steps it
	// counted); it is also how this member knows its own writes.
	var prev *metav1.MicroTime
	if lease != nil {
		prev = lease.Spec.RenewTime
	}
	stamp := m.stamp(prev)
	now := metav1.NewMicroTime(stamp)
	claims := m.Claims() // the fence timer may drop them meanwhile
	w := renewal{stamp: stamp, claimed: claims.Claimed()}
	annotations := map[string]string{AnnotationScheme: shard.Scheme}
	if m.cfg.OnClaims != nil {
		annotations[AnnotationSlots] = w.claimed.String()
		annotations[AnnotationPending] = claims.Pending.String()
		annotations[AnnotationGiven] = formatGiven(claims.Given, &m.givenTo)
	}
	if m.cfg.Covers != nil {
		w.cover = m.cfg.Covers()
		annotations[AnnotationCovers] = w.cover.Slots.String()
		annotations[AnnotationCoversSince] = strconv.FormatUint(w.cover.Since, 10)
		annotations[AnnotationSyncedTo] = strconv.FormatUint(w.cover.Synced, 10)
		annotations[AnnotationHolds] = claims.Holding.String()
	}
	m.mu.Lock()
	if m.draining {
		annotations[AnnotationDraining] = mark(stamp)
	}
	m.mu.Unlock()
	secs := int32(written(m.cfg.LeaseDuration) / time.Second)
	id := m.cfg.Identity
	switch {
	case apierrors.IsNotFound(err) && (!m.wrote.IsZero() || m.found != nil):
		// Deleted by hand under us (or under the process of our identity
		// we waited on, which may not have found out yet): the others may
		// forget it a lease duration after they first found it gone, and
		// one that never read it may take its slots at once. Out now;
		// re-created at the next turn, claiming nothing for a lease
		// duration (lostLease).
		m.wrote, m.tried, m.found = time.Time{}, m.tried[:0], nil
		return w, errLeaseDeleted
	case apierrors.IsNotFound(err):
		w.create, m.acquired = true, stamp
		w.lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.leaseName(), Namespace: m.cfg.Namespace, Labels: map[string]string{Label: m.cfg.Ring}, Annotations: annotations},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}
		m.try(stamp)
		return w, nil
	case err != nil:
		return w, err
	}
	// Its holderIdentity is not read: the Lease is ours by its name (one
	// whose holder was cleared or changed by hand is written back below);
	// whose write it last was, its renewTime tells.
	ownAttempt := lease.Spec.RenewTime != nil && slices.ContainsFunc(m.tried, lease.Spec.RenewTime.Time.Equal)
	if m.wrote.IsZero() && !ownAttempt {
		// Ours, but not written by us: a process with our identity
		// renews it, or did until it died. Adopt it only once it has
		// stood still for a lease duration, as the others judge a
		// dead member: two processes never work under one identity.
		// (A create of ours whose answer was lost holds a renewTime
		// we tried: ours.)
		if wait := m.stillFor(lease); wait > 0 {
			return w, fmt.Errorf("%w: lease %s exists (a previous process with identity %q, or another one running?); taking it over once it has not been renewed for %s, in %s",
				errForeignWriter, m.leaseName(), id, m.cfg.LeaseDuration, wait.Round(time.Millisecond))
		}
		m.acquired = stamp // adopted: a new acquisition
	}
	if !m.wrote.IsZero() && !m.ours(lease.Spec.RenewTime) {
		// Not a renewTime we wrote or tried: another process with our
		// identity renews it — or an older state came back (a saved
		// copy re-applied by another writer, an etcd restore, a write
		// of ours older than the 64 attempts tried keeps), which may
		// have overwritten renewals the others never read. Which one,
		// the Lease tells in a lease duration: another process keeps
		// renewing it; a stale write stands still, and is ours again
		// then, as a dead member's is the others'.
		if m.stillFor(lease) > 0 {
			return w, fmt.Errorf("%w: lease %s was renewed by someone else since our last renewal (two processes with identity %q? give each its own --sharding-identity); taking it back if it stands still for %s",
				errForeignWriter, m.leaseName(), id, m.cfg.LeaseDuration)
		}
		// Taken back: the others may have read none of our renewals
		// since it was first set back (a copy re-applied every second
		// overwrites each one): it claims nothing for the longest lease
		// duration, as a Lease re-created after a loss, so that they
		// read one before it works again. A new acquisition: the others
		// may have read renewTimes of ours above the copy's, which this
		// one's first renewals may not pass.
		m.lostLease()
		m.acquired = stamp
	}
	acquired := metav1.NewMicroTime(m.acquired)
	lease.Spec.HolderIdentity, lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds = &id, &now, &secs
	lease.Spec.AcquireTime = &acquired            // ours: a hand's change written back
	delete(lease.Annotations, AnnotationLeaving)  // ours again: a process of ours left it, or a hand wrote it
	delete(lease.Annotations, AnnotationDraining) // written below if we drain
	if lease.Labels[Label] != m.cfg.Ring {
		// Its ring's label taken off (or changed) by hand: the ring's
		// lists no longer show it, so the others count it gone and this
		// member its Lease lost; written back, the next list finds it.
		if lease.Labels == nil {
			lease.Labels = map[string]string{}
		}
		lease.Labels[Label] = m.cfg.Ring
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		lease.Annotations[k] = v
	}
	m.try(stamp)
	w.lease = lease
	return w, nil
}

// ours tells whether a renewTime r on this member's Lease, which it has
// written before, is its own: one it wrote or tried. Any other was written
// by another process of its identity, or is an older copy of the Lease set
// back by another writer (a saved copy re-applied, a snapshot restored),
// which may have overwritten renewals of ours the others never read: the
// member is out either way until the Lease stands still (stillFor).
func (m *Member) ours(r *metav1.MicroTime) bool {
	return r != nil && (r.Time.Equal(m.wrote) || slices.ContainsFunc(m.tried, r.Time.Equal))
}

// stamp is the renewTime of a write made now over a Lease that says prev
// (nil: none): the wall clock's, as the Lease stores it (microseconds),
// and later than prev and than every one this member wrote or tried. So a
// member's renewTimes only grow, whatever its wall clock does, and each
// renewal is fresh to the others (ledger.fresh): a copy re-applied never is.
func (m *Member) stamp(prev *metav1.MicroTime) time.Time {
	t := m.fence.wallNow().Truncate(time.Microsecond)
	floor := m.wrote
	for _, x := range m.tried {
		floor = later(floor, x)
	}
	if prev != nil {
		floor = later(floor, prev.Time)
	}
	if !t.After(floor) {
		t = floor.Add(time.Microsecond)
	}
	return t
}

// wroteRenewal records that the server took w.
func (m *Member) wroteRenewal(w renewal) {
	m.wroteLease()
	m.wrote = w.stamp.Truncate(time.Microsecond) // as the Lease stores it
	m.tried = m.tried[:0]
	m.published = w.claimed
	m.withdrawn = m.withdrawn.Union(m.publishedCover.Minus(w.cover.Slots))
	m.publishedCover = w.cover.Slots
}

// stillness is our own Lease as found not written by us: its holder's
// record (recordOf) since since, read so last.
type stillness struct {
	record      string
	since, last time.Time
}

// stillFor notes that our Lease was read as l, not written by us, and says
// how long it must still stand still before it is ours (0: it is): the
// lease duration its holder wrote, or ours if longer. It stands still
// while its holder's record does not move (a write by anyone else, a
// label, is no renewal), read at most two renew periods apart: a record
// read again after a gap (an etcd restore brings back one seen long
// before) starts the count anew.
func (m *Member) stillFor(l *coordinationv1.Lease) time.Duration {
	now, record := m.cfg.Now(), recordOf(l)
	if m.found == nil || m.found.record != record || now.Sub(m.found.last) > 2*m.cfg.RenewPeriod {
		m.found = &stillness{record: record, since: now}
	}
	m.found.last = now
	return max(0, max(m.cfg.LeaseDuration, min(leaseDurationOf(l), believed(m.cfg.LeaseDuration)))-now.Sub(m.found.since))
}

// try notes the renewTime an attempt is about to write (as the Lease stores
// it). Every attempt since the last success counts: under load, one times
// out after the server wrote it, the next times out before, and the Lease
// holds the older one. (Only the last counted once: a member then took
// its own earlier write for another process's, and fenced itself for good.)
func (m *Member) try(sent time.Time) {
	if len(m.tried) == 64 { // a member failing that long has fenced itself anyway
		m.tried = m.tried[1:]
	}
	m.tried = append(m.tried, sent.Truncate(time.Microsecond))
}

// look lists the ring's Leases and notes which moved.
func (m *Member) look(ctx context.Context) error {
	ctx, cancel := m.request(ctx)
	defer cancel()
	list, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: Label + "=" + m.cfg.Ring})
	if err != nil {
		return err
	}
	m.listed(klog.FromContext(ctx), list.Items, m.cfg.Now())
	return nil
}

// listed records a list of the ring's Leases, made at now.
func (m *Member) listed(log klog.Logger, items []coordinationv1.Lease, now time.Time) {
	listed, own := m.readAll(log, items)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ownSeen = own
	m.sighted(listed, now)
	if !m.withdrawn.Empty() { // the cover withdrawn is written: count from now
		w := withdrawal{slots: m.withdrawn, renewed: map[string]int{}}
		for name, o := range m.seen {
			w.renewed[name] = o.renewals
		}
		m.withdrawals = append(m.withdrawals, w)
		m.withdrawn = shard.SlotSet{}
	}
}

// readAll reads a list of the ring's Leases: the others', by name, and
// whether our own is among them. A Lease is the member its name says,
// whatever holder it names (a holder may be cleared or changed by hand;
// two Leases may name one holder).
func (m *Member) readAll(log klog.Logger, items []coordinationv1.Lease) (listed map[string]observed, own bool) {
	listed = map[string]observed{}
	for i := range items {
		if l := &items[i]; l.Name == m.leaseName() {
			own = true
		} else {
			listed[l.Name] = m.read(log, l)
		}
	}
	return listed, own
}

// read is what one of the others' Leases says (sight judges it).
func (m *Member) read(log klog.Logger, l *coordinationv1.Lease) observed {
	o := observed{id: identityOf(m.cfg.Ring, l.Name), rv: l.ResourceVersion, record: recordOf(l),
		lease: min(leaseDurationOf(l), believed(m.cfg.LeaseDuration)), draining: drainingMarked(l)}
	o.leaving, o.collected = leavingMarked(l)
	if r := l.Spec.RenewTime; r != nil {
		o.renewTime = r.Time
	}
	if a := l.Spec.AcquireTime; a != nil {
		o.acquired = a.Time
	}
	o.stray = l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != o.id
	if scheme := cmp.Or(l.Annotations[AnnotationScheme], legacyScheme); scheme != shard.Scheme {
		o.foreign = true
		if m.warned(l.Name, scheme) {
			log.Error(nil, "A ring Lease divides the objects by another scheme (a rolling update across a change of the hash, the slots or the assignment): not a member; while it lives, nobody claims a free slot",
				"lease", l.Name, "scheme", scheme, "ours", shard.Scheme)
		}
		return o
	}
	claims, err := shard.ParseSlotSet(l.Annotations[AnnotationSlots])
	if err != nil {
		// Not ours to read: take it as claiming everything, which is
		// safe (nobody takes a slot from it) and loud.
		log.Error(err, "A ring Lease claims slots we cannot read: taking it as claiming every slot", "lease", l.Name)
		claims = shard.All()
	}
	o.claims = claims
	// Covers that cannot be read cover nothing, and positions that
	// cannot be read are unknown: the handoff waits (at most
	// HandoffTimeout) instead of trusting them.
	o.covers.Slots, _ = shard.ParseSlotSet(l.Annotations[AnnotationCovers])
	o.covers.Since, _ = strconv.ParseUint(l.Annotations[AnnotationCoversSince], 10, 64)
	o.covers.Synced, _ = strconv.ParseUint(l.Annotations[AnnotationSyncedTo], 10, 64)
	// Pending that cannot be read is all pending (nothing taken for
	// confirmed); given slots that cannot be read are given to
	// somebody else (nobody claims them), loud.
	if o.pending, err = shard.ParseSlotSet(l.Annotations[AnnotationPending]); err != nil {
		o.pending = claims
	}
	// Holds that cannot be read hold nothing: they only decide who claims
	// a free slot first.
	o.holds, _ = shard.ParseSlotSet(l.Annotations[AnnotationHolds])
	if given, err := parseGiven(l.Annotations[AnnotationGiven]); err != nil {
		log.Error(err, "A ring Lease gives slots we cannot read: taking them as given to another member", "lease", l.Name)
		o.givenOthers = shard.All()
	} else {
		for to, slots := range given {
			if to == m.cfg.Identity {
				o.givenMe = o.givenMe.Union(slots)
			} else {
				o.givenOthers = o.givenOthers.Union(slots)
			}
		}
	}
	return o
}

// warned tells whether a Lease of another scheme is new to this member's
// logs (one line per Lease and scheme, not one per list).
func (m *Member) warned(name, scheme string) bool {
	m.logMu.Lock()
	defer m.logMu.Unlock()
	if m.foreignLogged[name] == scheme {
		return false
	}
	if m.foreignLogged == nil {
		m.foreignLogged = map[string]string{}
	}
	m.foreignLogged[name] = scheme
	return true
}

// peers is what the others' Leases say, judged at one instant.
type peers struct {
	// live: the members, sorted (this one among them if self); draining,
	// the live members that hand their slots over before they leave (no
	// share: not in live).
	live, draining []string
	// others: the slots the live members claim, and those they gave to
	// another member than this one; claimed, of those, the claims alone;
	// rival, the claims confirmed (not Pending); custody, the slots given
	// to this member.
	others, claimed, rival, custody shard.SlotSet
	// doubted: of others, the slots only Leases in doubt claim; sure, of
	// custody, the slots given by members' Leases not in doubt themselves
	// (not by a stray's).
	doubted, sure shard.SlotSet
	// confirmed and covers, by identity: what every live Lease of that
	// identity claims confirmed and covers (two Leases may name one).
	confirmed map[string]shard.SlotSet
	covers    map[string]Cover
	// holds, by identity: the slots each live member holds deletions of;
	// gave, the slots it names given to a member other than this one.
	holds, gave map[string]shard.SlotSet
}

// peers judges the others' Leases at judged (m.mu held): members, the
// leaving whose gifts still stand, and those of another scheme.
func (m *Member) peers(judged time.Time, self bool) peers {
	p := peers{confirmed: map[string]shard.SlotSet{}, covers: map[string]Cover{}, holds: map[string]shard.SlotSet{}, gave: map[string]shard.SlotSet{}}
	var doubted, firm shard.SlotSet // claimed by Leases in doubt, and by any other
	if self {
		p.live = append(p.live, m.cfg.Identity)
	}
	for _, o := range m.seen {
		if o.unproven && o.current(judged) { // watched in custody, claimed by nobody
			p.others, firm = p.others.Union(o.givenMe), firm.Union(o.givenMe)
		}
		switch {
		case !o.current(judged):
		case o.foreign:
			// It divides the objects otherwise: which of its objects are in
			// which of our slots, nobody knows. While it lives, nobody
			// claims a free slot, and nobody withdraws one it works.
			p.others, firm = shard.All(), shard.All()
		case o.leaving:
			// Left cleanly: not a member. The slots it gave stay given
			// until their new owners confirm them, or its lease runs out.
			if keepGiven {
				p.others = p.others.Union(o.givenOthers)
				p.custody = p.custody.Union(o.givenMe)
				firm = firm.Union(o.givenOthers)
				if !o.doubt {
					p.sure = p.sure.Union(o.givenMe)
				}
			}
		case o.stray:
			// Its holder is not its name's member (cleared or changed
			// by hand: the owner writes it back at its next renewal; or a
			// copy under another name, which stands still until its
			// lease runs out): no member to hand a slot to, and what it
			// says it covers is nobody's word. But its annotations are
			// its owner's last word: its claims stand, the slots it gave
			// stay given (custody holds), and a slot given to it is
			// accepted only once it shows it confirmed (or its lease runs
			// out). Its gifts are no giver's current word (a copy may be
			// applied long after the slot moved on): they give nothing
			// through a Lease in doubt (not sure).
			// In doubt, what it claims is unknown, as for a member.
			p.others = p.others.Union(o.claims).Union(o.givenOthers)
			if o.doubt {
				doubted = doubted.Union(o.claims)
				firm = firm.Union(o.givenOthers)
			} else {
				firm = firm.Union(o.claims).Union(o.givenOthers)
			}
			p.claimed = p.claimed.Union(o.claims)
			p.rival = p.rival.Union(o.claims.Minus(o.pending))
			p.custody = p.custody.Union(o.givenMe)
			if _, ok := p.confirmed[o.id]; !ok {
				p.confirmed[o.id] = o.claims.Minus(o.pending)
			}
		default:
			if o.doubt {
				doubted = doubted.Union(o.claims)
				firm = firm.Union(o.givenOthers)
			} else {
				firm = firm.Union(o.claims).Union(o.givenOthers)
				p.sure = p.sure.Union(o.givenMe)
			}
			switch {
			case o.draining:
				p.draining = append(p.draining, o.id)
			case !slices.Contains(p.live, o.id):
				p.live = append(p.live, o.id)
			}
			p.others = p.others.Union(o.claims).Union(o.givenOthers)
			p.claimed = p.claimed.Union(o.claims)
			p.custody = p.custody.Union(o.givenMe)
			p.holds[o.id] = p.holds[o.id].Union(o.holds)
			p.gave[o.id] = p.gave[o.id].Union(o.givenOthers)
			confirmed := o.claims.Minus(o.pending)
			p.rival = p.rival.Union(confirmed)
			if c, ok := p.confirmed[o.id]; ok { // a second Lease of one identity: what both say
				p.confirmed[o.id] = c.And(confirmed)
				p.covers[o.id] = p.covers[o.id].and(o.covers)
			} else {
				p.confirmed[o.id], p.covers[o.id] = confirmed, o.covers
			}
		}
	}
	slices.Sort(p.live)
	p.doubted = doubted.Minus(firm) // what no other Lease claims or was given
	return p
}

// update recomputes the live members from what was observed, then, with
// the handoff, steps the claims.
func (m *Member) update(log klog.Logger) {
	m.step.Lock()
	defer m.step.Unlock()
	// Swept before Busy: a sweep hands its deletions over, then says it is
	// done; read the other way round, a slot could be let go between the
	// two with deletions still queued.
	// Without sweeps, nothing to wait for.
	swept, covered, handed, ownCover := Sweeps{Slots: shard.All()}, shard.All(), shard.All(), shard.All()
	var stale shard.SlotSet
	if m.cfg.Swept != nil {
		swept, covered, handed, ownCover = m.cfg.Swept(), shard.SlotSet{}, shard.SlotSet{}, m.cfg.Covers().Slots
	}
	var busy, failing, held shard.SlotSet
	if m.cfg.Busy != nil {
		busy, failing = m.cfg.Busy() // before the step: after the last step took effect
	}
	if m.cfg.Held != nil {
		held = m.cfg.Held()
	}
	fenceNow := m.Now()
	now := m.cfg.Now()
	m.mu.Lock()
	self := !fenced(m.renewed, fenceNow, m.fenceAfter())
	// While we cannot list, the others' Leases cannot be seen to move:
	// they stand as they stood at the last list that succeeded, not taken
	// for dead for it (we could not confirm a claim on their slots anyway,
	// and a view that shrank would point the watcher at slots it cannot
	// have); nor is a member already dead then taken for live again.
	judged := now
	if !m.lookOK {
		judged = m.lookedAt
	}
	p := m.peers(judged, self && !m.draining)
	live, others, custody, rival, confirmed, covers := p.live, p.others, p.custody, p.rival, p.confirmed, p.covers
	doubted := p.doubted
	// A slot given to us by a Lease not in doubt was its giver's, claimed
	// and confirmed, and claimed or given on its Lease ever since: no
	// renewal a move hides (a Lease in doubt) can have confirmed it then,
	// nor before (the giver confirmed it only with no Lease in doubt
	// claiming it). Claimed only by Leases in doubt, it is claimed and
	// confirmed as if they did not claim it: a dead member's Lease that a
	// hand keeps moving keeps no joiner from its gifts.
	sure := doubted.And(p.sure)
	others, doubted = others.Minus(sure), doubted.Minus(sure)
	// The deletions we hold of a slot another live member works are its
	// (it heard of them too, or they went with a fence); of any other
	// slot, ours to handle: we keep watching it, and claim it when free.
	// A slot another member claims confirmed is worked if it is its share,
	// or was while it claimed it since (it Releases what it worked); one it
	// claims only to hand on (custody, held deletions) is not: it may have
	// listed the slot after our deletions, and gives it to us before its
	// owner only if we keep naming it held.
	assign := assignSlots(live)
	var worked shard.SlotSet
	sawWorked := map[string]shard.SlotSet{}
	for _, id := range slices.Concat(live, p.draining) {
		if id != m.cfg.Identity {
			w := confirmed[id].And(shard.SlotsOf(assign[id]...).Union(m.sawWorked[id]))
			sawWorked[id], worked = w, worked.Union(w)
		}
	}
	m.sawWorked = sawWorked
	if !self {
		m.owed = shard.SlotSet{}
	}
	m.owed = m.owed.Minus(worked)
	// So are those of a slot we let go handed over, until its new owner
	// confirms it: its cache held all our sweep listed, and its watch
	// hears what came after. Held here, they would name the slot in our
	// holds, and the new owner would leave it to us, which gave it away.
	holding := held.Union(m.owed).Minus(worked).Minus(m.handed.And(m.claims.Given))
	// A hold on a slot our cache has not covered for HandoffTimeout while
	// we were live (a watch that never lists it again) lapses: we could
	// not claim it, and the slot's owner, leaving it to us, would wait for
	// good. (Fenced, we are nobody's holder: an outage of the API server
	// longer than the fence keeps what we hold.)
	var lapsed shard.SlotSet
	for i := range m.uncoveredSince {
		switch {
		case !self || !held.Union(m.owed).Has(i) || ownCover.Has(i):
			m.uncoveredSince[i] = time.Time{}
		case m.uncoveredSince[i].IsZero():
			m.uncoveredSince[i] = now
		case now.Sub(m.uncoveredSince[i]) >= m.cfg.HandoffTimeout:
			lapsed = lapsed.With(i)
		}
	}
	if late := lapsed.And(m.claims.Holding); !late.Empty() {
		log.Info("Slots whose deletions we hold were not covered by our cache in time: no longer holding them; their owner may take them, and those deletions may be lost",
			"slots", late, "waited", m.cfg.HandoffTimeout)
	}
	holding, m.owed = holding.Minus(lapsed), m.owed.Minus(lapsed)
	// Of the slots we gave, those their new owner confirmed (or that
	// went to a member no longer live, or to nobody); and, so that a new
	// owner that never takes a slot cannot keep it from everyone, those
	// given longer than HandoffTimeout ago.
	// A new owner whose Lease, read once not giving the slot on, then
	// gives it on (to another than us) confirmed it meanwhile: a member
	// gives only what it claimed confirmed (our lists may have missed it).
	var accepted, expired shard.SlotSet
	for _, i := range m.claims.Given.List() {
		to, ok := confirmed[m.givenTo[i]]
		gaveOn := p.gave[m.givenTo[i]].Has(i)
		if !ok || to.Has(i) || gaveOn && m.giftSeen.Has(i) {
			accepted = accepted.With(i)
			continue
		}
		if !gaveOn && m.lookOK { // read by a list made after the gift
			m.giftSeen = m.giftSeen.With(i)
		}
		if now.Sub(m.givenAt[i]) >= m.cfg.HandoffTimeout {
			expired = expired.With(i)
		}
	}
	if !expired.Empty() {
		log.Info("Slots given to a member that has not taken them in time: no longer naming it; another may take them, and the deletions it kept may be lost",
			"slots", expired, "waited", m.cfg.HandoffTimeout)
		accepted = accepted.Union(expired)
	}
	// A cover lingers while a live member that claims the slot may still
	// give it to us on its word: from when we stop watching the slot for
	// ourselves, through the renewal that withdraws it, until that member
	// has renewed twice since (so its last decision was made on a list
	// that showed the withdrawal). A slot given to us meanwhile is ours
	// to claim (custody).
	lingering := m.publishedCover.Union(m.withdrawn).And(p.claimed)
	var kept []withdrawal
	for _, w := range m.withdrawals {
		var waiting shard.SlotSet
		for name, o := range m.seen {
			if o.member(judged) && o.renewals < w.renewed[name]+2 {
				waiting = waiting.Union(o.claims.And(w.slots))
			}
		}
		if !waiting.Empty() {
			lingering = lingering.Union(waiting)
			kept = append(kept, withdrawal{slots: waiting, renewed: w.renewed})
		}
	}
	m.withdrawals = kept
	// A slot goes to the member whose share it is, unless other live
	// members hold deletions of it: then to the first of those by
	// identity (not the slot's owner: it gets the slot last, from them).
	// A free slot is left to that holder too (each hands it on as it got
	// it, handling what it held first): whoever works the slot after
	// listed it later, and never heard of those deletions. Except a slot
	// given to this member by name: its giver gave it to a holder naming
	// it before its owner (holders name a slot another only Releases),
	// so what other holders heard meanwhile the giver heard too, and its
	// handoff (a sweep after this member covered it) left nothing; a holder
	// cannot claim it (given to us), so deferring would stall it until
	// the gift expires. (Let go overdue, without that cover, its log line
	// says what may be lost.)
	var to [shard.Slots]string
	for id, slots := range assign {
		for _, i := range slots {
			to[i] = id
		}
	}
	mine := shard.SlotsOf(assign[m.cfg.Identity]...)
	var first [shard.Slots]string
	for id, h := range p.holds {
		for _, i := range h.List() {
			if id != to[i] && (first[i] == "" || id < first[i]) {
				first[i] = id
			}
		}
	}
	for i, id := range first {
		if id == "" {
			continue
		}
		to[i] = id
		if custody.Has(i) {
			continue
		}
		if !holding.Has(i) || mine.Has(i) || id < m.cfg.Identity {
			others, doubted = others.With(i), doubted.Minus(shard.SlotsOf(i))
		}
	}
	if m.cfg.Swept != nil {
		// A slot counts as covered only by the member it goes to (another
		// may watch it for a moment and drop it, with the deletions it
		// kept); and not in the step where that member changes: a sweep
		// made on the word of the previous one does not count for it.
		for i := range to {
			if to[i] != "" && covers[to[i]].Slots.Has(i) && to[i] == m.ownerOf[i] {
				covered = covered.With(i)
			}
			if !swept.Slots.Has(i) || to[i] == "" || to[i] == m.cfg.Identity {
				continue
			}
			switch h, s := HandedOver(i, covers[to[i]], swept.At[i], swept.Newest[i]); {
			case h:
				handed = handed.With(i)
			case s:
				stale = stale.With(i)
			}
		}
		m.ownerOf = to
		if !m.lookOK {
			// Blind (its lists fail, or are refused), though it renews:
			// no slot is let go on a cover read before. The others take
			// its renewals for decisions made on a list that showed
			// their latest writes: a new owner that withdrew its cover
			// stops keeping the slot's deletions once each claimer
			// renewed twice since (Lingering). Overdue slots still go.
			covered, handed, stale = shard.SlotSet{}, shard.SlotSet{}, shard.SlotSet{}
		}
	}
	var membersChanged *MembersChanged
	if !slices.Equal(live, m.members) {
		log.Info("Ring members changed", "members", live, "before", m.members)
		membersChanged = &MembersChanged{Identity: m.cfg.Identity, Members: live, Before: m.members}
		m.members = live
		close(m.changed)
		m.changed = make(chan struct{})
	}
	if m.cfg.OnClaims == nil {
		m.mu.Unlock()
		if membersChanged != nil {
			m.observe(*membersChanged)
		}
		return
	}
	// No target before the second list: the first may have raced the
	// creation of the Leases of members that started with this one (each
	// would take itself to be alone, and list every slot for nothing).
	var target shard.SlotSet
	quiet := now.Before(m.quietUntil) // re-created after a deletion: claims nothing yet
	if self && m.looks >= 2 && !quiet {
		target = shard.SlotsOf(assign[m.cfg.Identity]...)
	}
	if quiet {
		// Slots given to it (on the word of a cover of its Lease before
		// the loss) it claims only once the quiet is over; meanwhile it
		// keeps watching them (lingering), and the deletions it holds.
		lingering = lingering.Union(custody).Union(holding)
		custody, holding = shard.SlotSet{}, shard.SlotSet{}
	}
	if now.Before(m.unseenUntil) { // an unseen Lease may work any free slot
		others, doubted = others.Union(shard.All().Minus(custody)), doubted.And(custody)
	}
	var overdue shard.SlotSet
	for i, since := range m.releasingSince {
		if !since.IsZero() && now.Sub(since) >= m.cfg.HandoffTimeout {
			overdue = overdue.With(i)
		}
	}
	before := m.claims
	m.claims = before.Step(View{Live: self, Target: target, Confirmed: m.confirmed,
		Published: m.published, Others: others, Doubted: doubted, Rival: rival, Busy: busy, Failing: failing,
		Custody: custody, Accepted: accepted, Holding: holding,
		Covers: ownCover, Covered: covered, Overdue: overdue, Swept: swept.Slots, Handed: handed, Stale: stale})
	// A slot withdrawn is owed until claimed again: held, as if its
	// deletions were (the watch may lag; the sweep of its let-go finds
	// what it had not brought).
	if self {
		m.owed = m.owed.Union(before.Working.And(rival)).Minus(m.claims.Working).Minus(m.claims.Releasing)
		m.claims.Holding = m.claims.Holding.Union(m.owed.Minus(m.claims.Claimed()))
		// What lingers: not what is watched for another reason anyway.
		m.claims.Lingering = lingering.Minus(m.claims.Claimed()).Minus(m.claims.Target).Minus(m.claims.Custody).Minus(m.claims.Holding)
	}
	for _, i := range m.claims.Given.Minus(before.Given).List() {
		m.givenTo[i] = m.ownerOf[i] // the member it goes to, by our view ("" without sweeps: nobody named)
		m.givenAt[i] = now
	}
	gave := m.claims.Given.Minus(before.Given)
	m.giftSeen = m.giftSeen.Minus(gave).And(m.claims.Given)
	m.handed = m.handed.Minus(gave).Union(gave.And(handed)).And(m.claims.Given)
	for i := range m.releasingSince {
		switch {
		case !m.claims.Releasing.Has(i):
			m.releasingSince[i] = time.Time{}
		case m.releasingSince[i].IsZero():
			m.releasingSince[i] = now
		}
	}
	after, renewed := m.claims, m.renewed
	if m.claims != before && self {
		if stuck := before.Releasing.Minus(after.Claimed()).And(failing); !stuck.Empty() {
			log.Info("Letting slots go with deletions still not handled: their Deleted keeps failing; the new owner never hears of them",
				"slots", stuck, "waited", m.cfg.HandoffTimeout)
		}
	}
	if late := after.Sweep.Minus(before.Sweep).Minus(covered); !late.Empty() {
		log.Info("Slots being let go were never covered by their new owner in time: sweeping and letting them go anyway; a deletion made between the sweep and the new owner's list will be seen by no replica",
			"slots", late, "waited", m.cfg.HandoffTimeout)
	}
	m.mu.Unlock()
	if membersChanged != nil {
		m.observe(*membersChanged)
	}
	if after != before {
		fenced := !self && !before.Claimed().Empty()
		if fenced {
			log.Info("Fenced: our Lease could not be renewed in time; every claim dropped", "lastRenewal", renewed)
		}
		log.V(1).Info("Claims changed", "working", after.Working, "pending", after.Pending, "releasing", after.Releasing, "sweep", after.Sweep, "target", after.Target)
		m.cfg.OnClaims(after)
		m.observe(ClaimsChanged{Identity: m.cfg.Identity, Claims: after, Before: before, Fenced: fenced, Members: live})
	}
}

// leave stops this member and deletes its Lease, so that the others see
// it gone now. In this order: it drops its claims and its lease (the gate
// admits nothing from here on), marks its Lease leaving (AnnotationLeaving,
// claiming nothing, naming the slots it gave: the others count it out at
// their next list, and the slots it gave stay given), waits a RenewPeriod
// for their lists to read the mark, and, while a slot it gave is not
// confirmed by its new owner, lists the ring's Leases every RenewPeriod
// until it is, LeaveTimeout in all at most; then it deletes the Lease. A
// Lease that vanishes unmarked counts as live for a lease duration (it may
// have been deleted by hand under a member still working): so one whose
// mark could not be written, or that an observer saw vanish without
// having read the mark, is out a lease duration later instead.
func (m *Member) leave(log klog.Logger) {
	given, held := m.quit()
	// Only a Lease this process holds is marked and deleted: one it never
	// wrote, or one renewed behind its back, is another process's (of the
	// same identity), which works under it.
	if !held {
		log.Info("Leaving the ring's Lease in place: this process never held it", "lease", m.leaseName())
		return
	}
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	var del metav1.DeleteOptions
	switch rv, err := m.markLeaving(given); {
	case errors.Is(err, errForeignWriter):
		log.Error(err, "Leaving the ring's Lease in place: another process renews it", "lease", m.leaseName())
		return
	case err != nil:
		// Not marked, not deleted: unmarked, a vanished Lease counts live
		// for a lease duration anyway, and the delete, without the mark's
		// resourceVersion to hold it to, could take the Lease of a process
		// of our identity that took it over meanwhile.
		log.Error(err, "Could not mark the ring's Lease leaving: the others count this member out a lease duration after its last renewal", "lease", m.leaseName())
		return
	default:
		// Deleted as marked: not if anyone wrote it since.
		del.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
		m.waitConfirmed(log, given)
	}
	ctx, cancel := m.request(context.Background())
	defer cancel()
	err := leases.Delete(ctx, m.leaseName(), del)
	if err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "Could not delete the ring's Lease on leaving: the others see it expire", "lease", m.leaseName())
	}
}

// quit drops this member's claims and its lease (its gate admits nothing
// from here on), and says which slots it gave and whether it ever held
// its Lease.
func (m *Member) quit() (given shard.SlotSet, held bool) {
	m.setRenewed(time.Time{})
	m.mu.Lock()
	m.members = nil
	close(m.changed)
	m.changed = make(chan struct{})
	had := m.claims
	m.claims = Claims{}
	m.mu.Unlock()
	if m.cfg.OnClaims != nil && had != (Claims{}) {
		m.cfg.OnClaims(Claims{})
		m.observe(ClaimsChanged{Identity: m.cfg.Identity, Before: had})
	}
	if keepGiven {
		given = had.Given
	}
	return given, !m.wrote.IsZero() || len(m.tried) > 0
}

// leaveWait bounds what a clean leave waits after its mark, in renew
// periods: for the others to read it, and for the new owners of the slots
// it gave to confirm them (a new owner reads the gift, claims the slot at
// its next renewal, confirms it at the list after, and writes it confirmed
// at the renewal after that).
const leaveWait = 3

// LeaveTimeout bounds a clean leave at renew period renew, from Run's
// context's end to its return: the mark (a GET and an UPDATE, within a
// renew period), the wait (leaveWait renew periods, the lists included),
// the delete (within one).
func LeaveTimeout(renew time.Duration) time.Duration { return (leaveWait + 2) * renew }

// waitConfirmed waits a renew period after the mark, then, while a slot of
// given is not confirmed by the member it was given to (and that member is
// live), lists the ring's Leases every renew period, leaveWait renew
// periods in all at most. A slot still not confirmed then is dropped with
// a log line: its deletions since the sweep are its new owner's alone.
func (m *Member) waitConfirmed(log klog.Logger, given shard.SlotSet) {
	end := m.cfg.Clock.Now().Add(leaveWait * m.cfg.RenewPeriod)
	for {
		left := end.Sub(m.cfg.Clock.Now())
		<-m.cfg.Clock.After(min(m.cfg.RenewPeriod, max(0, left)))
		if given.Empty() || !m.cfg.Clock.Now().Before(end) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(m.cfg.RenewPeriod, end.Sub(m.cfg.Clock.Now())))
		err := m.look(ctx)
		cancel()
		if err != nil {
			continue
		}
		given = m.unconfirmed(given)
	}
	if !given.Empty() {
		log.Info("Leaving the ring with slots given to a member that has not confirmed them: no longer naming it; another may take them, and the deletions it kept may be lost",
			"slots", given, "waited", leaveWait*m.cfg.RenewPeriod)
	}
}

// unconfirmed is the slots of given that, by the last list, the member each
// was given to has not confirmed, and that member is live.
func (m *Member) unconfirmed(given shard.SlotSet) shard.SlotSet {
	m.mu.Lock()
	confirmed := m.peers(m.cfg.Now(), false).confirmed
	m.mu.Unlock()
	for _, i := range given.List() {
		if to, ok := confirmed[m.givenTo[i]]; !ok || to.Has(i) {
			given = given.Minus(shard.SlotsOf(i))
		}
	}
	return given
}

// markLeaving writes AnnotationLeaving on this member's Lease, with a
// renewal (the mark's value is its renewTime), no claims, and the slots it
// gave, and returns the resourceVersion it wrote.
func (m *Member) markLeaving(given shard.SlotSet) (string, error) {
	ctx, cancel := m.request(context.Background())
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	lease, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	stamp, err := m.leavingMark(lease, given)
	if err != nil {
		return "", err
	}
	marked, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	m.wrote = stamp.Truncate(time.Microsecond)
	return marked.ResourceVersion, nil
}

// leavingMark changes lease, this member's as read, into its leaving mark
// (markLeaving), unless another process renews it; it returns the mark's
// renewTime.
func (m *Member) leavingMark(lease *coordinationv1.Lease, given shard.SlotSet) (time.Time, error) {
	if !m.ours(lease.Spec.RenewTime) {
		return time.Time{}, fmt.Errorf("%w: lease %s; not marking it", errForeignWriter, m.leaseName())
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	stamp := m.stamp(lease.Spec.RenewTime)
	now, id := metav1.NewMicroTime(stamp), m.cfg.Identity
	lease.Spec.HolderIdentity, lease.Spec.RenewTime = &id, &now
	lease.Annotations[AnnotationLeaving] = mark(stamp)
	delete(lease.Annotations, AnnotationDraining)
	for _, k := range []string{AnnotationSlots, AnnotationPending, AnnotationGiven, AnnotationHolds} {
		if _, ok := lease.Annotations[k]; ok {
			lease.Annotations[k] = ""
		}
	}
	if !given.Empty() {
		lease.Annotations[AnnotationGiven] = formatGiven(given, &m.givenTo)
	}
	m.try(stamp)
	return stamp, nil
}
