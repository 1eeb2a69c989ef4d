package compare

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// writeReport puts a report into dir as BASE.json (v), BASE.md and BASE.svg.
func writeReport(dir, base string, v any, markdown, svg string) error {
	j, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	for ext, data := range map[string][]byte{".json": j, ".md": []byte(markdown), ".svg": []byte(svg)} {
		if err := os.WriteFile(filepath.Join(dir, base+ext), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readReport reads a report's JSON back (to render it again).
func readReport[T any](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r T
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}
