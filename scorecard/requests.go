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

// pace sorts the requests begun in [from, to] (reqs by start) into judged
// waits and chained requests; a LIST's further pages are the LIST's.
//
// A request of the same sort as the one before it, which did not fail, is
// that request asked again: its wait from that one's start is judged (a
// burst of LISTs storms however calm the retries before). After a failure,
// one of another sort sent within FallbackGap is chained (a LIST after a
// failed WatchList); any other is a retry, its wait from the failure's end
// judged unless it honoured the failure's Retry-After. The rest are
// chained. Judged waits come shortest first.
func pace(reqs []request, from, to time.Time) (waits []time.Duration, asAsked, chained int) {
	var last *request // of the requests begun before, the one that ends last (End 0: still open)
	var prev *request // the request begun before, pages aside
	for i := range reqs {
		q := &reqs[i]
		if q.Sort == sortPage {
			continue
		}
		t := time.Unix(0, q.At)
		if !t.Before(from) && !t.After(to) {
			switch {
			case prev != nil && q.Sort == prev.Sort && !(prev.Failed && prev.End != 0 && prev.End <= q.At):
				waits = append(waits, time.Duration(q.At-prev.At)) // the same request again
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
		prev = q
		if last == nil || last.End != 0 && (q.End == 0 || q.End > last.End) {
			last = q
		}
	}
	slices.Sort(waits)
	return waits, asAsked, chained
}
