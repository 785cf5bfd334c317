package template

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// addLayer stores the layer whose uncompressed tar stream open returns,
// unless it is stored already. want is its digest ("sha256:…") when
// known: a stream that does not hash to it is refused as corrupt; ""
// names the layer by what it hashes to. lowers are the digests of the
// layers below it, bottom first. It returns the layer's digest.
func (s *Store) addLayer(want string, open func() (io.ReadCloser, error), lowers []string, budget *int64) (string, applyStats, error) {
	if want != "" {
		if d := s.storedAs(want); d != "" {
			li, _ := s.layerInfo(d)
			*budget -= li.Size
			return d, applyStats{}, nil
		}
	}
	tmp, err := s.tmpDir()
	if err != nil {
		return "", applyStats{}, err
	}
	defer removeAll(tmp)
	tree := filepath.Join(tmp, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", applyStats{}, err
	}
	if !s.rootless {
		if err := os.Lchown(tree, s.uidBase, s.uidBase); err != nil {
			return "", applyStats{}, err
		}
	}
	rc, err := open()
	if err != nil {
		return "", applyStats{}, err
	}
	defer rc.Close()
	a := &applier{s: s, dir: tree, budget: budget}
	for i := len(lowers) - 1; i >= 0; i-- {
		a.lowers = append(a.lowers, s.LayerDir(lowers[i]))
	}
	h := sha256.New()
	if err := a.apply(io.TeeReader(rc, h)); err != nil {
		return "", a.stats, err
	}
	// A tar stream may end before its data does: what follows the end
	// counts towards the digest as the image's author hashed it.
	if _, err := io.Copy(h, rc); err != nil {
		return "", a.stats, fmt.Errorf("read layer: %w", err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if want != "" && got != want {
		return "", a.stats, fmt.Errorf("layer %s is corrupt: its contents hash to %s", short(want), short(got))
	}
	if s.haveLayer(got) {
		return got, a.stats, nil
	}
	dst := s.LayerDir(got)
	if _, err := os.Lstat(dst); err == nil {
		removeAll(dst) // left half-made: no record
	}
	if err := os.Rename(tree, dst); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", a.stats, fmt.Errorf("store layer %s: %w", short(got), err)
	}
	info, _ := json.Marshal(layerInfo{Digest: got, Size: a.stats.bytes, UIDBase: s.wantBase(), Created: time.Now().UTC()})
	if err := writeFile(s.infoPath(got), info); err != nil {
		return "", a.stats, fmt.Errorf("record layer %s: %w", short(got), err)
	}
	return got, a.stats, nil
}

// haveLayer reports whether digest is stored whole, for this uid base.
func (s *Store) haveLayer(digest string) bool {
	li, err := s.layerInfo(digest)
	if err != nil || li.UIDBase != s.wantBase() {
		return false
	}
	fi, err := os.Lstat(s.LayerDir(digest))
	return err == nil && fi.IsDir()
}

func (s *Store) tmpDir() (string, error) {
	var b [8]byte
	rand.Read(b[:])
	p := filepath.Join(s.dir, "tmp", hex.EncodeToString(b[:]))
	if err := os.Mkdir(p, 0o700); err != nil {
		return "", err
	}
	return p, nil
}

// Export writes a stored layer as a new tar stream, whose digest is not
// the one the layer is stored by: the original stream's order, times and
// headers are gone once it is unpacked. Export records each digest it
// wrote as an alias of the stored layer (layerinfo/<hex>.alias), so that
// importing the exported image again finds the layers it already has
// instead of storing them twice.

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (s *Store) aliasPath(digest string) string {
	return filepath.Join(s.dir, "layerinfo", strings.TrimPrefix(digest, "sha256:")+".alias")
}

// storedAs returns the digest layer digest is stored under: itself, or
// the layer an export wrote it from; "" when it is not stored.
func (s *Store) storedAs(digest string) string {
	if s.haveLayer(digest) {
		return digest
	}
	b, err := os.ReadFile(s.aliasPath(digest))
	if err != nil {
		return ""
	}
	d := strings.TrimSpace(string(b))
	if !digestPattern.MatchString(d) || !s.haveLayer(d) {
		return ""
	}
	return d
}

// addAlias records that exported, a tar stream Export wrote, unpacks to
// stored layer d.
func (s *Store) addAlias(exported, d string) error {
	if exported == d || s.haveLayer(exported) {
		return nil
	}
	return writeFile(s.aliasPath(exported), []byte(d+"\n"))
}
