// Package filesystem implements envd's filesystem.Filesystem service and
// the /files routes: stat, list, make, move, remove and watch paths, and
// upload and download files.
//
// Every path is resolved inside Options.Root. Relative paths start at the
// user's home, as in E2B. A path whose ".." would climb above the root is
// refused, and symlinks are followed as if Root were "/" (with
// filepath-securejoin), so no path or link reaches outside. Inside a
// sandbox Root is "/" and pivot_root is the real wall; the resolution here
// keeps the API honest in tests and on backends without one. Resolution
// and use are two steps, so a symlink swapped in between by the sandbox's
// own user could redirect a call, but only to somewhere else inside Root.
package filesystem

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"connectrpc.com/connect"
	securejoin "github.com/cyphar/filepath-securejoin"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/mcpbox/mcpbox/gen/filesystempb"
	"github.com/mcpbox/mcpbox/gen/filesystempb/filesystempbconnect"
)

// Options configure a Service.
type Options struct {
	// Root confines every path; default "/".
	Root string
	// Home is where relative paths start; default /home/user.
	Home string
	// Uid and Gid own what the API creates (when the agent may chown).
	Uid, Gid int
	// MaxFileBytes caps one uploaded file; default 100 MiB.
	MaxFileBytes int64
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
}

// Service implements filesystempbconnect.FilesystemHandler and serves
// /files through FilesHandler.
type Service struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	watchers map[string]*pollWatcher
}

var _ filesystempbconnect.FilesystemHandler = (*Service)(nil)

// New returns a Service.
func New(opts *Options) *Service {
	s := &Service{watchers: map[string]*pollWatcher{}}
	if opts != nil {
		s.opts = *opts
	}
	if s.opts.Root == "" {
		s.opts.Root = "/"
	}
	if s.opts.Home == "" {
		s.opts.Home = "/home/user"
	}
	if s.opts.MaxFileBytes <= 0 {
		s.opts.MaxFileBytes = 100 << 20
	}
	s.log = s.opts.Logger
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// errLeaves is the error for a path that climbs out of the root.
var errLeaves = errors.New("leaves the sandbox")

// resolve maps a sandbox path to a host path inside Root, following
// symlinks within Root. It returns the host path and the clean sandbox
// path.
func (s *Service) resolve(p string) (host, clean string, err error) {
	if p == "" {
		return "", "", fmt.Errorf("path is empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if !strings.HasPrefix(p, "/") {
		p = s.opts.Home + "/" + p
	}
	// Walk the components ourselves: filepath.Clean would quietly turn
	// "/../etc" into "/etc", and a caller climbing out should be told.
	var parts []string
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return "", "", fmt.Errorf("path %q %w", p, errLeaves)
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	clean = "/" + strings.Join(parts, "/")
	host, err = securejoin.SecureJoin(s.opts.Root, clean)
	if err != nil {
		return "", "", fmt.Errorf("resolve %q: %w", p, err)
	}
	return host, clean, nil
}

// sandboxPath turns a host path inside Root back into the sandbox's view.
func (s *Service) sandboxPath(host string) string {
	rel, err := filepath.Rel(s.opts.Root, host)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + rel
}

// rpcPath resolves p for an RPC, mapping failures to InvalidArgument.
func (s *Service) rpcPath(p string) (string, error) {
	host, _, err := s.resolve(p)
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	return host, nil
}

// rpcError maps an OS error to a Connect code, naming the path.
func rpcError(path string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%s: no such file or directory", path))
	case errors.Is(err, fs.ErrExist):
		return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("%s: already exists", path))
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s: permission denied", path))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%s: no space left in the sandbox", path))
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("%s: %w", path, err))
}

// entry describes host path p.
func (s *Service) entry(p string) (*filesystempb.EntryInfo, error) {
	li, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	fi := li
	e := &filesystempb.EntryInfo{Name: filepath.Base(p), Path: s.sandboxPath(p)}
	if li.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(p)
		e.SymlinkTarget = &target
		if ti, err := os.Stat(p); err == nil {
			fi = ti
		}
	}
	e.Type = filesystempb.FileType_FILE_TYPE_FILE
	if fi.IsDir() {
		e.Type = filesystempb.FileType_FILE_TYPE_DIRECTORY
	}
	e.Size = fi.Size()
	e.Mode = uint32(fi.Mode().Perm())
	e.Permissions = fi.Mode().String()
	e.ModifiedTime = timestamppb.New(fi.ModTime())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Mode |= uint32(st.Mode) &^ uint32(fs.ModePerm) & 0o7000 // setuid, setgid, sticky
		e.Owner = s.name("passwd", st.Uid)
		e.Group = s.name("group", st.Gid)
	}
	e.Metadata = readMetadata(p)
	return e, nil
}

// name looks id up in the sandbox's /etc/passwd or /etc/group, falling back
// to the number.
func (s *Service) name(file string, id uint32) string {
	f, err := os.Open(filepath.Join(s.opts.Root, "etc", file))
	if err == nil {
		defer f.Close()
		want := strconv.FormatUint(uint64(id), 10)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) > 2 && fields[2] == want {
				return fields[0]
			}
		}
	}
	return strconv.FormatUint(uint64(id), 10)
}

// owner is who owns what a request creates: the sandbox user, or root
// when the request names it (envd's user: Authorization: Basic "root:" on
// RPCs, ?username=root on /files).
type owner struct {
	uid, gid int
	// metadata is stored on the files an upload writes.
	metadata map[string]string
}

// ownerOf returns the owner a request names; an unknown user is an error.
func (s *Service) ownerOf(name string) (owner, error) {
	switch name {
	case "", "user":
		return owner{uid: s.opts.Uid, gid: s.opts.Gid}, nil
	case "root":
		return owner{uid: 0, gid: 0}, nil
	}
	return owner{}, fmt.Errorf("unknown user %q: use user or root", name)
}

// rpcOwner reads the owner from an RPC's Authorization header.
func (s *Service) rpcOwner(h http.Header) (owner, error) {
	name := ""
	if b64, ok := strings.CutPrefix(h.Get("Authorization"), "Basic "); ok {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			return owner{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the Authorization header is not base64: %v", err))
		}
		name, _, _ = strings.Cut(string(raw), ":")
	}
	o, err := s.ownerOf(name)
	if err != nil {
		return owner{}, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return o, nil
}

// chown gives what the API created to its owner; it fails quietly when
// the agent may not (tests as an ordinary user).
func (s *Service) chown(p string, o owner) {
	if os.Geteuid() == 0 {
		os.Lchown(p, o.uid, o.gid)
	}
}

// mkdirAll creates p and missing parents, owned by o.
func (s *Service) mkdirAll(p string, o owner) error {
	if fi, err := os.Stat(p); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", s.sandboxPath(p), syscall.ENOTDIR)
		}
		return nil
	}
	if err := s.mkdirAll(filepath.Dir(p), o); err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	s.chown(p, o)
	return nil
}

// Stat describes one path.
func (s *Service) Stat(_ context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	p, err := s.rpcPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := s.entry(p)
	if err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its parents; it is an error if it exists.
func (s *Service) MakeDir(_ context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	p, err := s.rpcPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	o, err := s.rpcOwner(req.Header())
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(p); err == nil {
		return nil, rpcError(req.Msg.GetPath(), fs.ErrExist)
	}
	if err := s.mkdirAll(p, o); err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	}
	e, err := s.entry(p)
	if err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination, creating destination's parents.
func (s *Service) Move(_ context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	src, err := s.rpcPath(req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := s.rpcPath(req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	o, err := s.rpcOwner(req.Header())
	if err != nil {
		return nil, err
	}
	if err := s.mkdirAll(filepath.Dir(dst), o); err != nil {
		return nil, rpcError(req.Msg.GetDestination(), err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, rpcError(req.Msg.GetSource(), err)
	}
	e, err := s.entry(dst)
	if err != nil {
		return nil, rpcError(req.Msg.GetDestination(), err)
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: e}), nil
}

// Remove deletes a file or a directory tree.
func (s *Service) Remove(_ context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	p, err := s.rpcPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if p == filepath.Clean(s.opts.Root) {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove the sandbox's root"))
	}
	if _, err := os.Lstat(p); err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	}
	if err := os.RemoveAll(p); err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}

// ListDir lists a directory; depth N > 1 descends N levels.
func (s *Service) ListDir(_ context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	p, err := s.rpcPath(req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(p); err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	} else if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", req.Msg.GetPath()))
	}
	depth := int(max(req.Msg.GetDepth(), 1))
	var entries []*filesystempb.EntryInfo
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, d := range ents {
			child := filepath.Join(dir, d.Name())
			e, err := s.entry(child)
			if err != nil {
				continue // removed while we listed
			}
			entries = append(entries, e)
			// Do not descend through symlinks: they may loop.
			if level < depth && d.IsDir() {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(p, 1); err != nil {
		return nil, rpcError(req.Msg.GetPath(), err)
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: entries}), nil
}
