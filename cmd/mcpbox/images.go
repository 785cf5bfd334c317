package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// imageExt names the file extension of each image type a result carries.
var imageExt = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"}

// imageWriter writes the images of rich results (plots) as files, so
// `mcpbox run` and `mcpbox exec` never drop them: a terminal cannot show
// them, but the user can open the files whose paths are printed.
type imageWriter struct {
	dir string // where to write; "" is the current directory
	n   int
}

// write saves one image as dir/mcpbox-plot-N.ext, never over an existing
// file, and returns its path. When dir cannot be written (a read-only
// working directory), the system's temporary directory is used instead.
func (w *imageWriter) write(mime string, data []byte) (string, error) {
	ext := imageExt[mime]
	if ext == "" {
		ext = ".bin"
	}
	dir := w.dir
	if dir == "" {
		dir = "."
	}
	for attempt := 0; ; attempt++ {
		path, err := w.create(dir, ext, data)
		if err == nil || attempt > 0 || w.dir != "" {
			return path, err
		}
		// Only the default directory falls back; one the user named
		// is theirs to fix.
		dir = os.TempDir()
	}
}

func (w *imageWriter) create(dir, ext string, data []byte) (string, error) {
	for {
		w.n++
		path := filepath.Join(dir, fmt.Sprintf("mcpbox-plot-%d%s", w.n, ext))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return "", err
		}
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		return path, nil
	}
}
