package filesystem

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// FilesHandler serves envd's file routes:
//
//	GET  /files?path=P            the file's bytes (gzip when accepted)
//	POST /files?path=P            multipart field "file" (one or more) or
//	                              an application/octet-stream body
//
// Errors are JSON {code, message}: 400 bad path or not a regular file
// (directories, FIFOs, devices and sockets are refused with what they
// are), 404 missing, 413 above MaxFileBytes, 507 when the sandbox's disk
// is full. A download sends at most the size the file had when opened.
func (s *Service) FilesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.ownerOf(r.URL.Query().Get("username")); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.download(w, r)
		case http.MethodPost:
			s.upload(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			writeError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on /files")
		}
	})
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

func (s *Service) download(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	p, _, err := s.resolve(path)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, size, status, err := openRegular(p, path)
	if err != nil {
		writeError(w, status, err.Error())
		return
	}
	defer f.Close()
	// Never more than the size stat gave: a file that grows while it is
	// read cannot make the reply unbounded.
	body := io.LimitReader(f, size)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		h.Set("Content-Encoding", "gzip")
		if r.Method == http.MethodHead {
			return
		}
		gz := gzip.NewWriter(w)
		io.Copy(gz, body)
		gz.Close()
		return
	}
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	if r.Method != http.MethodHead {
		io.Copy(w, body)
	}
}

// openRegular opens the host path p (the caller's path is name) for
// reading if it is a regular file, and returns it with its size. Anything
// else is refused with 400 and what it is. Opening never blocks: O_NONBLOCK
// makes a FIFO without a writer open at once (the fstat that follows
// refuses it), and O_NOFOLLOW refuses a symlink swapped in since p was
// resolved.
func openRegular(p, name string) (f *os.File, size int64, status int, err error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			return nil, 0, http.StatusNotFound, fmt.Errorf("%s: no such file", name)
		case errors.Is(err, syscall.ENOTDIR):
			return nil, 0, http.StatusNotFound, fmt.Errorf("%s: no such file (a parent is not a directory)", name)
		case errors.Is(err, syscall.ENAMETOOLONG):
			return nil, 0, http.StatusBadRequest, fmt.Errorf("%.100s…: the path is too long", name)
		case errors.Is(err, syscall.ELOOP):
			return nil, 0, http.StatusBadRequest, fmt.Errorf("%s is a symbolic link that changed while it was resolved: try again", name)
		case errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.EOPNOTSUPP):
			// open(2) of a Unix socket; describe what lstat sees.
			if fi, lerr := os.Lstat(p); lerr == nil {
				return nil, 0, http.StatusBadRequest, notRegular(name, fi.Mode())
			}
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			return nil, 0, http.StatusForbidden, fmt.Errorf("%s: permission denied", name)
		}
		return nil, 0, http.StatusInternalServerError, fmt.Errorf("%s: %w", name, err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, http.StatusInternalServerError, fmt.Errorf("%s: fstat: %w", name, err)
	}
	if uint32(st.Mode)&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, 0, http.StatusBadRequest, notRegular(name, modeOf(uint32(st.Mode)))
	}
	// Regular files ignore O_NONBLOCK today; clear it so no filesystem
	// that honours it can hand the copy a spurious EAGAIN.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, 0, http.StatusInternalServerError, fmt.Errorf("%s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), p), st.Size, 0, nil
}

// modeOf turns a stat(2) mode's file type into an fs.FileMode's.
func modeOf(m uint32) os.FileMode {
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return os.ModeDir
	case syscall.S_IFIFO:
		return os.ModeNamedPipe
	case syscall.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	case syscall.S_IFBLK:
		return os.ModeDevice
	case syscall.S_IFSOCK:
		return os.ModeSocket
	case syscall.S_IFLNK:
		return os.ModeSymlink
	}
	return os.ModeIrregular
}

// notRegular says why a download of name was refused and what to do.
func notRegular(name string, m os.FileMode) error {
	const cmd = "; read it with a command instead (for example head -c N)"
	switch {
	case m.IsDir():
		return fmt.Errorf("%s is a directory: list it with ListDir, or download its files one by one", name)
	case m&os.ModeNamedPipe != 0:
		return fmt.Errorf("%s is a named pipe (FIFO): only regular files can be downloaded"+cmd, name)
	case m&os.ModeCharDevice != 0:
		return fmt.Errorf("%s is a character device: only regular files can be downloaded"+cmd, name)
	case m&os.ModeDevice != 0:
		return fmt.Errorf("%s is a block device: only regular files can be downloaded"+cmd, name)
	case m&os.ModeSocket != 0:
		return fmt.Errorf("%s is a socket: only regular files can be downloaded; connect to it from a command instead", name)
	case m&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link: download the file it points to", name)
	}
	return fmt.Errorf("%s is not a regular file: only regular files can be downloaded", name)
}

// uploaded is one entry of the upload reply.
type uploaded struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
	// Metadata is what the upload stored on the file (X-Metadata-*).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// uploadError carries the HTTP status of a failed write.
type uploadError struct {
	status int
	msg    string
}

func (e *uploadError) Error() string { return e.msg }

func (s *Service) upload(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	o, _ := s.ownerOf(r.URL.Query().Get("username")) // checked by FilesHandler
	md, err := uploadMetadata(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	o.metadata = md
	if r.ContentLength > s.opts.MaxFileBytes {
		writeError(w, http.StatusRequestEntityTooLarge, s.tooLarge(path))
		return
	}
	var out []uploaded
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		out, err = s.uploadMultipart(r, path, o)
	} else {
		if path == "" {
			writeError(w, http.StatusBadRequest, "path is required for an octet-stream upload")
			return
		}
		var u *uploaded
		u, err = s.write(path, r.Body, o)
		if u != nil {
			out = append(out, *u)
		}
	}
	if err != nil {
		var ue *uploadError
		if errors.As(err, &ue) {
			writeError(w, ue.status, ue.msg)
		} else {
			writeError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (s *Service) uploadMultipart(r *http.Request, path string, o owner) ([]uploaded, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, &uploadError{http.StatusBadRequest, "bad multipart body: " + err.Error()}
	}
	var out []uploaded
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, &uploadError{http.StatusBadRequest, "bad multipart body: " + err.Error()}
		}
		if part.FormName() != "file" {
			continue
		}
		dest := path
		raw := rawFileName(part)
		switch {
		case dest == "" && raw != "" && !strings.HasSuffix(raw, "/"):
			// envd's multi-file write: each part's file name is its
			// whole destination, absolute or relative to the home.
			dest = raw
		case dest == "" || strings.HasSuffix(dest, "/") || s.isDir(dest):
			name := filepath.Base(raw)
			if name == "." || name == "/" || name == "" {
				return out, &uploadError{http.StatusBadRequest, "a multipart file without a file name needs a path"}
			}
			if dest == "" {
				dest = s.opts.Home
			}
			dest = strings.TrimSuffix(dest, "/") + "/" + name
		}
		u, err := s.write(dest, part, o)
		if err != nil {
			return out, err
		}
		out = append(out, *u)
	}
	if len(out) == 0 {
		return nil, &uploadError{http.StatusBadRequest, `no multipart field named "file"`}
	}
	return out, nil
}

// rawFileName is a part's file name as sent, directories included:
// Part.FileName keeps only the last element, and E2B's SDKs send the
// whole destination path there.
func rawFileName(part *multipart.Part) string {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return part.FileName()
	}
	return params["filename"]
}

func (s *Service) isDir(path string) bool {
	p, _, err := s.resolve(path)
	if err != nil {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func (s *Service) tooLarge(path string) string {
	return fmt.Sprintf("%s: the file is larger than the limit of %d bytes", path, s.opts.MaxFileBytes)
}

// write stores body at path, creating parents. A file above the limit or
// one that fills the disk is removed, not left half written.
func (s *Service) write(path string, body io.Reader, o owner) (*uploaded, error) {
	p, clean, err := s.resolve(path)
	if err != nil {
		return nil, &uploadError{http.StatusBadRequest, err.Error()}
	}
	if err := s.mkdirAll(filepath.Dir(p), o); err != nil {
		return nil, &uploadError{statusOf(err), fmt.Sprintf("%s: create parent directories: %v", path, err)}
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, &uploadError{statusOf(err), fmt.Sprintf("%s: %v", path, err)}
	}
	s.chown(p, o)
	src := &bodyReader{r: io.LimitReader(body, s.opts.MaxFileBytes+1)}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > s.opts.MaxFileBytes {
		os.Remove(p)
		return nil, &uploadError{http.StatusRequestEntityTooLarge, s.tooLarge(path)}
	}
	if err == nil && len(o.metadata) > 0 {
		if merr := setMetadata(p, o.metadata); merr != nil {
			os.Remove(p)
			return nil, &uploadError{http.StatusBadRequest, fmt.Sprintf("%s: %v", path, merr)}
		}
	}
	if err != nil {
		os.Remove(p)
		if src.err != nil {
			return nil, &uploadError{http.StatusBadRequest, fmt.Sprintf("%s: read the upload: %v", path, src.err)}
		}
		if st := statusOf(err); st == http.StatusInsufficientStorage {
			return nil, &uploadError{st, fmt.Sprintf("%s: no space left in the sandbox (the flavor's disk limit)", path)}
		}
		return nil, &uploadError{statusOf(err), fmt.Sprintf("%s: %v", path, err)}
	}
	return &uploaded{Path: clean, Name: filepath.Base(clean), Type: "file", Metadata: o.metadata}, nil
}

// bodyReader remembers a read error, so that a truncated or malformed
// upload is told apart from a failed write.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return http.StatusInsufficientStorage
	case errors.Is(err, os.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
