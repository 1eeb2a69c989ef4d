package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The image the node runs is the Dockerfile's final stage: its user, its
// entrypoint, and at the path the Dockerfile copies it to, the very binary
// the Dockerfile's go build line makes (hack/image-binary.sh), executable.
// Read from the tarball as containerd imports it, against the Dockerfile as
// written, not against what the image builder thought it read.
func TestImageIsTheDockerfilesFinalStage(t *testing.T) {
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	final := string(df)[strings.LastIndex(string(df), "\nFROM "):]
	want := func(re string) string {
		m := regexp.MustCompile(`(?m)^` + re + `$`).FindStringSubmatch(final)
		if m == nil {
			t.Fatalf("the Dockerfile's final stage has no line matching %s:\n%s", re, final)
		}
		return m[1]
	}
	user := want(`USER (\S+)`)
	var entrypoint []string
	if err := json.Unmarshal([]byte(want(`ENTRYPOINT (\[.*\])`)), &entrypoint); err != nil {
		t.Fatal(err)
	}
	binPath := want(`COPY --from=build \S+ (\S+)`)

	img := readImage(t, filepath.Join(imageDir, "rawwatch-"+tagA+".tar"))
	if img.tag != "rawwatch:"+tagA {
		t.Errorf("image tagged %q, want rawwatch:%s", img.tag, tagA)
	}
	if img.config.Config.User != user {
		t.Errorf("image user %q, the Dockerfile's USER %q", img.config.Config.User, user)
	}
	if !slices.Equal(img.config.Config.Entrypoint, entrypoint) {
		t.Errorf("image entrypoint %q, the Dockerfile's ENTRYPOINT %q", img.config.Config.Entrypoint, entrypoint)
	}
	if img.config.OS != "linux" {
		t.Errorf("image os %q", img.config.OS)
	}
	f, ok := img.files[strings.TrimPrefix(binPath, "/")]
	if !ok {
		t.Fatalf("the image has no %s (files: %v)", binPath, img.names())
	}
	if f.mode&0o111 == 0 {
		t.Errorf("%s in the image is not executable: mode %o", binPath, f.mode)
	}
	built, err := os.ReadFile(filepath.Join(imageDir, "rawwatch"))
	if err != nil {
		t.Fatal(err)
	}
	// imageDir/rawwatch was last built for tagB: rebuild the comparison from
	// the tagB image, whose binary that is.
	imgB := readImage(t, filepath.Join(imageDir, "rawwatch-"+tagB+".tar"))
	if fb := imgB.files[strings.TrimPrefix(binPath, "/")]; fb.sum != sha256.Sum256(built) {
		t.Errorf("%s in rawwatch:%s is not the binary hack/image-binary.sh built", binPath, tagB)
	}
	if f.sum == imgB.files[strings.TrimPrefix(binPath, "/")].sum {
		t.Errorf("rawwatch:%s and rawwatch:%s hold the same binary: the version is not stamped", tagA, tagB)
	}
	// The user's entry, for tools that look the user up by name.
	if p, ok := img.files["etc/passwd"]; !ok || !strings.Contains(string(p.data), ":"+strings.Split(user, ":")[0]+":") {
		t.Errorf("/etc/passwd in the image does not name uid %s", user)
	}
}

type imageFile struct {
	mode int64
	sum  [32]byte
	data []byte
}

type image struct {
	tag    string
	config struct {
		OS     string `json:"os"`
		Config struct {
			User       string   `json:"User"`
			Entrypoint []string `json:"Entrypoint"`
		} `json:"config"`
	}
	files map[string]imageFile
}

func (img *image) names() []string {
	var n []string
	for k := range img.files {
		n = append(n, k)
	}
	slices.Sort(n)
	return n
}

// readImage reads a docker-archive tarball (what ctr images import takes):
// manifest.json names the config and the layers, applied in order.
func readImage(t *testing.T, path string) *image {
	t.Helper()
	entries := map[string][]byte{}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := eachEntry(f, func(h *tar.Header, b []byte) { entries[h.Name] = b }); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("%s: manifest.json: %v (%d images)", path, err, len(manifest))
	}
	img := &image{files: map[string]imageFile{}}
	if len(manifest[0].RepoTags) == 1 {
		img.tag = manifest[0].RepoTags[0]
	}
	if err := json.Unmarshal(entries[manifest[0].Config], &img.config); err != nil {
		t.Fatalf("%s: config: %v", path, err)
	}
	for _, l := range manifest[0].Layers {
		var r io.Reader = bytes.NewReader(entries[l])
		if zr, err := gzip.NewReader(bytes.NewReader(entries[l])); err == nil {
			r = zr
		}
		err := eachEntry(r, func(h *tar.Header, b []byte) {
			if h.Typeflag == tar.TypeReg {
				img.files[strings.TrimPrefix(h.Name, "./")] = imageFile{mode: h.Mode, sum: sha256.Sum256(b), data: b}
			}
		})
		if err != nil {
			t.Fatalf("%s: layer %s: %v", path, l, err)
		}
	}
	return img
}

// eachEntry calls fn with each entry of the tar stream r and its content.
func eachEntry(r io.Reader, fn func(*tar.Header, []byte)) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		fn(h, b)
	}
}
