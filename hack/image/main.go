// Command image writes, without a registry or a container engine, the
// container images the single-node cluster runs (make image): the
// controller's, as the Dockerfile's final stage describes it, the pod
// sandbox's ("pause"), and a scraper's for the tests ("fetch": GET a URL with
// the pod's token). Each is a tarball that `ctr images import` reads.
//
//	image controller -dockerfile Dockerfile -binary bin/image/rawwatch -tag rawwatch:v1 -o rawwatch.tar
//	image pause -binary bin/image/pause -tag rawwatch-pause:1 -o pause.tar
//	image fetch -binary bin/image/fetch -tag rawwatch-fetch:1 -o fetch.tar
//
// The controller image holds the binary at the path the Dockerfile copies it
// to, runs as the Dockerfile's USER and starts with its ENTRYPOINT: those are
// read from the Dockerfile's final stage, and an instruction this program
// does not know there is an error rather than something silently left out.
// The distroless base's own files are not pulled (nothing can be): in their
// place go the few the binary could use, /etc/passwd and /etc/group naming
// the non-root user, its home and a world-writable /tmp.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "controller" && os.Args[1] != "pause" && os.Args[1] != "fetch") {
		fmt.Fprintln(os.Stderr, "usage: image controller|pause|fetch -binary FILE -tag NAME:TAG -o FILE.tar [-dockerfile Dockerfile]")
		os.Exit(2)
	}
	kind := os.Args[1]
	fs := flag.NewFlagSet(kind, flag.ExitOnError)
	dockerfile := fs.String("dockerfile", "Dockerfile", "the Dockerfile whose final stage the controller image follows")
	binary := fs.String("binary", "", "the static binary to put in the image")
	tag := fs.String("tag", "", "the image's name and tag")
	out := fs.String("o", "", "the tarball to write")
	_ = fs.Parse(os.Args[2:])
	if *binary == "" || *tag == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "image: -binary, -tag and -o are required")
		os.Exit(2)
	}
	var spec Stage
	switch kind {
	case "controller":
		text, err := os.ReadFile(*dockerfile)
		if err != nil {
			fail(err)
		}
		if spec, err = FinalStage(string(text)); err != nil {
			fail(fmt.Errorf("%s: %w", *dockerfile, err))
		}
	case "pause":
		spec = Stage{Path: "/pause", User: "65535:65535", Entrypoint: []string{"/pause"}}
	case "fetch":
		spec = Stage{Path: "/fetch", User: "65534:65534", Entrypoint: []string{"/fetch"}}
	}
	if err := write(spec, *binary, *tag, *out); err != nil {
		fail(err)
	}
	fmt.Printf("image: %s (%s as %s, user %s) -> %s\n", *tag, *binary, spec.Path, spec.User, *out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}

// Stage is what the image is made of: one binary at Path, run as User with
// Entrypoint.
type Stage struct {
	Path       string
	User       string
	Entrypoint []string
}

// FinalStage reads the Dockerfile's last stage: FROM, one COPY --from of the
// binary, USER and ENTRYPOINT (exec form). Anything else there is refused.
func FinalStage(dockerfile string) (Stage, error) {
	var lines []string
	for _, l := range strings.Split(dockerfile, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			lines = lines[:0]
		}
		lines = append(lines, l)
	}
	var s Stage
	for _, l := range lines {
		instr, args, _ := strings.Cut(l, " ")
		args = strings.TrimSpace(args)
		switch strings.ToUpper(instr) {
		case "FROM":
		case "COPY":
			f := strings.Fields(args)
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") || s.Path != "" {
				return s, fmt.Errorf("final stage: want one COPY --from=STAGE SRC DST, got %q", l)
			}
			s.Path = f[2]
		case "USER":
			s.User = args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(args), &s.Entrypoint); err != nil || len(s.Entrypoint) == 0 {
				return s, fmt.Errorf("final stage: ENTRYPOINT must be in exec form, got %q", l)
			}
		default:
			return s, fmt.Errorf("final stage: %s is not something this image builder knows how to reproduce (%q)", instr, l)
		}
	}
	switch {
	case s.Path == "" || !path.IsAbs(s.Path):
		return s, errors.New("final stage: no COPY of the binary to an absolute path")
	case s.User == "":
		return s, errors.New("final stage: no USER")
	case len(s.Entrypoint) == 0:
		return s, errors.New("final stage: no ENTRYPOINT")
	}
	return s, nil
}

func write(s Stage, binary, tag, out string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	uid, gid, err := ids(s.User)
	if err != nil {
		return err
	}
	base, err := layer(baseFiles(uid, gid))
	if err != nil {
		return err
	}
	top, err := layer([]file{{name: s.Path, mode: 0o755, data: bin}})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.User = s.User
	cfg.Config.Entrypoint = s.Entrypoint
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.WorkingDir = "/"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// ids reads USER as uid[:gid], numbers only: the kubelet's runAsNonRoot
// check can verify a numeric user from the image alone.
func ids(user string) (uid, gid int, err error) {
	u, g, hasGroup := strings.Cut(user, ":")
	if uid, err = strconv.Atoi(u); err != nil {
		return 0, 0, fmt.Errorf("USER %q: want a numeric uid[:gid]", user)
	}
	gid = uid
	if hasGroup {
		if gid, err = strconv.Atoi(g); err != nil {
			return 0, 0, fmt.Errorf("USER %q: want a numeric uid[:gid]", user)
		}
	}
	return uid, gid, nil
}

type file struct {
	name     string
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
}

// baseFiles stand in for the distroless base: the user's entries and the
// directories a program may expect.
func baseFiles(uid, gid int) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, gid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", gid)
	return []file{
		{name: "/etc", dir: true, mode: 0o755},
		{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "/etc/group", mode: 0o644, data: []byte(group)},
		{name: "/home", dir: true, mode: 0o755},
		{name: "/home/nonroot", dir: true, mode: 0o700, uid: uid, gid: gid},
		{name: "/tmp", dir: true, mode: 0o1777},
	}
}

// layer is an uncompressed tar layer of files, with fixed times so that the
// same inputs give the same digest.
func layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		// Parent directories first, as a tar extractor wants them.
		for d := path.Dir(f.name); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: strings.TrimPrefix(f.name, "/"), Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch}
		if f.dir {
			dirs[f.name] = true
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
