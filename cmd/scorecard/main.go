// Command scorecard runs the fault scorecard (package scorecard): every
// named fault against every client on a local control plane behind the
// fault proxy, and writes the page (OUT/scorecard.md, docs/scorecard.md),
// its numbers (OUT/scorecard.json) and a chart (OUT/scorecard.svg).
//
//	scorecard [--duration 20s] [--recover 1m] [--faults a,b] [--clients raw,informer] [--out out/scorecard]
//	scorecard --from out/scorecard/scorecard.json --out docs   (judge again and render the page from the numbers)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"rawwatch/flaglist"
	"rawwatch/scorecard"
)

func main() {
	scorecard.MaybeClientMain() // a client process is this binary, run again
	duration := flag.Duration("duration", 20*time.Second, "how long each fault lasts")
	recover := flag.Duration("recover", scorecard.DefaultRecover, "how long after a fault a client has to converge")
	faults := flag.String("faults", strings.Join(scorecard.FaultNames(), ","), "faults to run")
	clients := flag.String("clients", strings.Join(scorecard.Kinds(), ","), "clients to run (also: "+scorecard.KindNoBackoff+", broken on purpose)")
	out := flag.String("out", "out/scorecard", "output directory")
	from := flag.String("from", "", "judge again and render OUT's page, numbers and chart from this scorecard.json instead of running")
	flag.Parse()
	if err := run(*duration, *recover, *faults, *clients, *out, *from); err != nil {
		fmt.Fprintln(os.Stderr, "scorecard:", err)
		os.Exit(1)
	}
}

func run(duration, recover time.Duration, faults, clients, out, from string) error {
	var rep *scorecard.Report
	if from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		rep = &scorecard.Report{}
		if err := json.Unmarshal(b, rep); err != nil {
			return err
		}
		for i, row := range rep.Rows { // judged again, by today's rules
			if row.Err == "" {
				rep.Rows[i].Verdict, rep.Rows[i].Why = scorecard.Verdict(row.Measure)
			}
		}
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		logf := func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
		var err error
		rep, err = scorecard.Run(ctx, scorecard.Options{Faults: flaglist.Split(faults), Kinds: flaglist.Split(clients),
			Duration: duration, Recover: recover, OutDir: out, Logf: logf})
		if err != nil {
			return err
		}
		rep.Command = "scorecard " + strings.Join(os.Args[1:], " ")
		rep.Commit = commit()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "scorecard.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "scorecard.md"), []byte(rep.Markdown("scorecard.svg")), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "scorecard.svg"), []byte(rep.SVG()), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s (%s)\n", filepath.Join(out, "scorecard.md"), rep.Took.Round(time.Second))
	return nil
}

// version is what make stamps into the binary (git describe: the commit,
// "-dirty" if the tree had changes).
var version = ""

// commit is the revision this binary was built from: make's stamp, or go
// build's ("+" if the tree had changes).
func commit() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 7:
			rev = s.Value[:7]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
