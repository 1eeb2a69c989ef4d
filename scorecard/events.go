package scorecard

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"

	"rawwatch/compare"
)

// events is what an events file says the handler heard.
type events struct {
	last     map[string]word // the last word on each key
	after    int             // events heard at or after the fault's end
	canaryAt time.Time       // when the canary was first heard at its resourceVersion (zero: never)
}

// word is one handler call: its type (compare.EvAdd, ...) and the
// object's resourceVersion; deletedBefore: a deletion of the key was heard
// before it.
type word struct {
	typ           byte
	rv            string
	deletedBefore bool
}

// readEvents reads an events file ("T RV AT KEY" lines).
func readEvents(path string, end time.Time, canary, canaryRV string) (events, error) {
	ev := events{last: map[string]word{}}
	f, err := os.Open(path)
	if err != nil {
		return ev, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || len(fields[0]) != 1 {
			continue // a crash may cut the last line
		}
		typ, rv, key := fields[0][0], fields[1], fields[3]
		prev, known := ev.last[key]
		ev.last[key] = word{typ: typ, rv: rv, deletedBefore: known && (prev.deletedBefore || prev.typ == compare.EvDelete)}
		if at, err := strconv.ParseInt(fields[2], 10, 64); err == nil && at >= end.UnixNano() {
			ev.after++
			if key == canary && rv == canaryRV && ev.canaryAt.IsZero() {
				ev.canaryAt = time.Unix(0, at)
			}
		}
	}
	return ev, sc.Err()
}

// against counts, over every key the server holds (key → resourceVersion)
// or the handler heard of, where the handler's last word differs from the
// server: keys held whose last word it never heard (or heard deleted),
// heard at another resourceVersion, and keys gone whose deletion it never
// heard, ghosts among them (heard deleted, then added again). A key the
// handler never heard of and the server no longer holds is owed nothing
// (deleted before the client's initial sync).
func (ev events) against(server map[string]string) (notHeard, stale, extra, ghosts int) {
	for key, rv := range server {
		switch w, ok := ev.last[key]; {
		case !ok || w.typ == compare.EvDelete:
			notHeard++
		case w.rv != rv:
			stale++
		}
	}
	for key, w := range ev.last {
		if _, held := server[key]; held || w.typ == compare.EvDelete {
			continue
		}
		extra++
		if w.deletedBefore {
			ghosts++
		}
	}
	return notHeard, stale, extra, ghosts
}
