package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// No Docker engine runs here, so the Dockerfile is checked in two halves:
// `make image-binary` runs its go build line and checks the binary, and this
// test lints its structure against the spec.
func TestDockerfile(t *testing.T) {
	data := readFile(t, "Dockerfile")
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+(\.\d+)?)$`).FindStringSubmatch(readFile(t, "go.mod"))
	if goLine == nil {
		t.Fatal("no go line in go.mod")
	}
	for _, problem := range lintDockerfile(data, goLine[1]) {
		t.Error(problem)
	}
	ignore := readFile(t, ".dockerignore")
	for _, want := range []string{".git/", "bin/", "out/"} {
		if !strings.Contains("\n"+ignore+"\n", "\n"+want+"\n") {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	// The -X main.version target exists: the binary, built with it, says so.
	if out, err := exec.Command(binary, "--version").CombinedOutput(); err != nil || string(out) != "rawwatch "+binaryVersion+"\n" {
		t.Errorf("rawwatch --version of a binary built with -X main.version=%s: %v %q", binaryVersion, err, out)
	}
}

// The linter catches what it is for.
func TestDockerfileLintCatchesMistakes(t *testing.T) {
	bad := `FROM golang:latest
RUN go build -o /out/app .
FROM gcr.io/distroless/static
RUN echo hi
COPY /out/app /app
USER root
ENTRYPOINT /app
`
	problems := strings.Join(lintDockerfile(bad, "1.26.0"), "\n")
	for _, want := range []string{
		`stage 1 must be "FROM golang:X.Y.Z AS build"`,
		`"golang:latest" is not pinned`,
		`"gcr.io/distroless/static" is not pinned`,
		`the final stage must be FROM gcr.io/distroless/static:nonroot`,
		`the final stage runs "RUN echo hi"`,
		`the final stage must COPY --from=build`,
		`USER root is not a non-root user`,
		`ENTRYPOINT must be in exec form`,
		`CGO_ENABLED=0`, `-trimpath`, `-s -w`, `-X main.version=${VERSION}`,
	} {
		if !strings.Contains(problems, want) {
			t.Errorf("no problem mentions %q; got:\n%s", want, problems)
		}
	}
	if old := lintDockerfile(strings.Replace(readFile(t, "Dockerfile"), "golang:1.26.8", "golang:1.25.3", 1), "1.26.0"); len(old) != 1 ||
		!strings.Contains(old[0], "older than go.mod's go 1.26.0") {
		t.Errorf("an old builder: %v", old)
	}
}

// readFile reads a file of the repository, by its path from the root.
func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

type instruction struct{ cmd, args string }

// parseDockerfile splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments.
func parseDockerfile(text string) [][]instruction {
	var stages [][]instruction
	var logical strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if logical.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			logical.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		logical.WriteString(trimmed)
		cmd, args, _ := strings.Cut(logical.String(), " ")
		logical.Reset()
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	return stages
}

var pinnedGo = regexp.MustCompile(`^golang:(\d+)\.(\d+)\.(\d+)$`)

// lintDockerfile returns what is wrong with a Dockerfile, by the spec:
// a golang builder pinned to an exact release no older than go.mod's, every
// image pinned (no latest), CGO_ENABLED=0 -trimpath -ldflags "-s -w" with the
// version, and a final stage on distroless static:nonroot that only copies
// the binary and runs it as a non-root user in exec form.
func lintDockerfile(text, goModVersion string) []string {
	var problems []string
	add := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	stages := parseDockerfile(text)
	if len(stages) < 2 {
		return []string{fmt.Sprintf("want a multi-stage build, found %d stages", len(stages))}
	}
	names := map[string]bool{}
	for i, stage := range stages {
		fields := strings.Fields(stage[0].args)
		image := fields[0]
		if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
			names[fields[2]] = true
		}
		if i == 0 && (!pinnedGo.MatchString(image) || len(fields) != 3 || fields[2] != "build") {
			add(`stage 1 must be "FROM golang:X.Y.Z AS build" (an exact Go release), not "FROM %s"`, stage[0].args)
		}
		if names[image] && i > 0 {
			continue // FROM an earlier stage
		}
		_, tag, tagged := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
		if (!tagged && !strings.Contains(image, "@sha256:")) || tag == "latest" {
			add("image %q is not pinned: give it a tag (not latest) or a digest", image)
		}
	}
	if m := pinnedGo.FindStringSubmatch(strings.Fields(stages[0][0].args)[0]); m != nil {
		want := strings.Split(goModVersion, ".")
		if cmpVersion(m[1:3], want[:2]) < 0 {
			add("builder Go %s.%s.%s is older than go.mod's go %s", m[1], m[2], m[3], goModVersion)
		}
	}

	// The build: one go build with the image's flags.
	var build string
	for _, in := range stages[0] {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	for _, flag := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w`, "-X main.version=${VERSION}"} {
		if !strings.Contains(build, flag) {
			add("the go build line lacks %s: %q", flag, build)
		}
	}

	final := stages[len(stages)-1]
	if img := strings.Fields(final[0].args)[0]; img != "gcr.io/distroless/static:nonroot" {
		add("the final stage must be FROM gcr.io/distroless/static:nonroot, not %s", img)
	}
	var copied, user, entry bool
	for _, in := range final[1:] {
		switch in.cmd {
		case "RUN":
			add("the final stage runs %q: distroless has no shell", "RUN "+in.args)
		case "COPY":
			copied = copied || strings.HasPrefix(in.args, "--from=build ")
		case "USER":
			user = true
			u, _, _ := strings.Cut(in.args, ":")
			if uid, err := strconv.Atoi(u); (err == nil && uid == 0) || (err != nil && u != "nonroot") {
				add("USER %s is not a non-root user", in.args)
			}
		case "ENTRYPOINT":
			entry = true
			var argv []string
			if json.Unmarshal([]byte(in.args), &argv) != nil || len(argv) == 0 {
				add("ENTRYPOINT must be in exec form ([\"/rawwatch\"]): %s", in.args)
			}
		}
	}
	if !copied {
		add("the final stage must COPY --from=build the binary")
	}
	if !user {
		add("the final stage sets no USER")
	}
	if !entry {
		add("the final stage has no ENTRYPOINT")
	}
	return problems
}

// cmpVersion compares dotted numeric versions given as parts.
func cmpVersion(a, b []string) int {
	for i := range min(len(a), len(b)) {
		x, _ := strconv.Atoi(a[i])
		y, _ := strconv.Atoi(b[i])
		if x != y {
			return x - y
		}
	}
	return 0
}
