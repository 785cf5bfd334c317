package template

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcpbox/mcpbox"
)

// Commit makes template name from parent plus the changes in upper, a
// sandbox's overlay upper directory: what the session installed, wrote
// and deleted becomes one new layer on top of parent's. The sandbox may
// go on running; what it writes meanwhile may or may not be in the
// layer.
//
// A session of the host template ("" or "default") commits too: its
// system is the host's read-only /usr, which is no layer, so the new
// template is HostSystem, its one layer what the session wrote outside
// that system (its home, /workspace, /tmp), and its sandboxes get the
// host's /usr again beneath it. Commits on top of it stay HostSystem.
func (s *Store) Commit(ctx context.Context, name, parent, upper string, progress Progress) (*mcpbox.Template, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if Canonical(name) != name || name == mcpbox.HostTemplate {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "%q names a built-in template; choose another name", name)
	}
	base, err := s.Get(parent)
	if err != nil {
		return nil, err
	}
	if name == base.Name {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "commit to a new name: %s is the session's own template", name)
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	progress.say("reading the session's changes")
	start := time.Now()
	budget := s.maxBytes
	digest, st, err := s.addLayer("", func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(s.writeTar(ctx, pw, upper)) }()
		return pr, nil
	}, base.Layers, &budget)
	if err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINTERNAL, "commit: %v", err)
	}
	t := &mcpbox.Template{Name: name, Layers: append(append([]string{}, base.Layers...), digest),
		User: base.User, Workdir: base.Workdir, Env: base.Env, Parent: base.Name,
		Source: "commit", Created: time.Now().UTC()}
	// A session on the host's system writes no /usr: what runs in the
	// new template's sandboxes is the host's.
	t.HostSystem = base.Name == mcpbox.HostTemplate || base.HostSystem
	if t.HostSystem {
		t.Languages, t.Shell = Host().Languages, Host().Shell
	} else {
		s.detect(t)
	}
	if err := s.save(t); err != nil {
		return nil, err
	}
	progress.say("template %s: %s plus %.1f MB of changes (layer %s) in %s", name, base.Name, float64(st.bytes)/1e6, short(digest), time.Since(start).Round(time.Millisecond))
	return t, nil
}

// writeTar writes the tree at root as a layer's tar stream: overlay
// whiteouts and opaque directories become OCI whiteouts, owners are
// unmapped to the sandbox's ids, hard links are links again. Sockets and
// devices other than whiteouts are left out; so are extended
// attributes.
func (s *Store) writeTar(ctx context.Context, w io.Writer, root string) error {
	return s.writeTarIDs(ctx, w, root, s.unmapID)
}

// writeTarIDs is writeTar with unmap turning host ids into the image's.
func (s *Store) writeTarIDs(ctx context.Context, w io.Writer, root string, unmap func(int) int) error {
	tw := tar.NewWriter(w)
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		if fi.Mode()&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if st != nil {
			hdr.Uid, hdr.Gid = unmap(int(st.Uid)), unmap(int(st.Gid))
		}
		if isWhiteout(p, fi) {
			dir, base := filepath.Split(hdr.Name)
			return tw.WriteHeader(&tar.Header{Name: dir + whPrefix + base, Typeflag: tar.TypeReg, Mode: 0o600, ModTime: fi.ModTime(), Format: tar.FormatPAX})
		}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if opaque(p) {
				return tw.WriteHeader(&tar.Header{Name: hdr.Name + whOpaque, Typeflag: tar.TypeReg, Mode: 0o600, ModTime: fi.ModTime(), Format: tar.FormatPAX})
			}
			return nil
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			if st != nil && st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					return tw.WriteHeader(hdr)
				}
				inodes[st.Ino] = hdr.Name
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
			f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			// A file that grew since it was looked at is cut at its
			// size then; one that shrank fails the commit.
			if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			return nil
		case fi.Mode()&os.ModeNamedPipe != 0:
			hdr.Typeflag = tar.TypeFifo
			return tw.WriteHeader(hdr)
		}
		return nil // sockets, devices
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// opaque reports whether directory p hides what the layers below have
// in it: either overlay form ("x" only marks xattr whiteouts inside).
func opaque(p string) bool {
	buf := make([]byte, 4)
	for _, name := range []string{xattrOpaque, xattrOpaqueTrusted} {
		if n, err := unix.Lgetxattr(p, name, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// Layer names under a store's layers/ directory are digests' hex:
// nothing else may name one.
func validHex(h string) bool {
	if len(h) != 64 {
		return false
	}
	return strings.Trim(h, "0123456789abcdef") == ""
}
