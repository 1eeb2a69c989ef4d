package scorecard

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"time"

	"rawwatch/faultproxy"
)

// readRequests reads a client's requests file: the last record of each
// request (a request is written as it begins and again as it ends), by
// start.
func readRequests(path string) ([]request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byID := map[int64]int{}
	var out []request
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var q request
		if json.Unmarshal(sc.Bytes(), &q) != nil {
			continue // a crash may cut the last line
		}
		if i, ok := byID[q.ID]; ok {
			out[i] = q
			continue
		}
		byID[q.ID] = len(out)
		out = append(out, q)
	}
	slices.SortStableFunc(out, func(a, b request) int { return int(a.At - b.At) })
	return out, sc.Err()
}

// countRequests adds the requests begun in [from, to] to m: by sort, the busiest
// minute, and their pace.
func countRequests(m *Measure, reqs []request, from, to time.Time) {
	var at []time.Time
	for _, q := range reqs {
		t := time.Unix(0, q.At)
		if t.Before(from) || t.After(to) {
			continue
		}
		at = append(at, t)
		switch q.Sort {
		case sortList:
			m.Lists++
		case sortPage:
			m.Pages++
		case sortWatch:
			m.Watches++
		case sortWatchList:
			m.WatchLists++
		default:
			m.Others++
		}
	}
	m.Busiest = faultproxy.BusiestIn(at, time.Minute)
	m.Waits, m.AsAsked, m.Chained = pace(reqs, from, to)
}

// pace sorts the requests begun in [from, to] (reqs by start) into retries
// and chained requests. A request sent while another was in flight, or
// after one that succeeded, is chained; so is one of another sort sent at
// once after one that failed (within FallbackGap: a LIST after a WatchList
// that failed, a relist after a 410). Any other sent after one that failed
// (the last to end before it began) is a retry, and waited from that end
// to its start: as asked, if at least the Retry-After its failure carried;
// else its wait is judged (waits, shortest first).
func pace(reqs []request, from, to time.Time) (waits []time.Duration, asAsked, chained int) {
	var last *request // of the requests begun before, the one that ends last (End 0: still open)
	for i := range reqs {
		q := &reqs[i]
		t := time.Unix(0, q.At)
		if !t.Before(from) && !t.After(to) {
			switch {
			case last == nil || last.End == 0 || last.End > q.At || !last.Failed:
				chained++ // the first, one beside another in flight, or after a success
			case q.Sort != last.Sort && time.Duration(q.At-last.End) < FallbackGap:
				chained++ // the next step after a failure, not the same request again
			default:
				w := time.Duration(q.At - last.End)
				if last.RetryAfter > 0 && w >= time.Duration(last.RetryAfter)*time.Second-100*time.Millisecond {
					asAsked++
				} else {
					waits = append(waits, w)
				}
			}
		}
		if last == nil || last.End != 0 && (q.End == 0 || q.End > last.End) {
			last = q
		}
	}
	slices.Sort(waits)
	return waits, asAsked, chained
}
