package hosted

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/mcpbox/mcpbox"
)

// maxFileBytes bounds servers.json: it is read on every change.
const maxFileBytes = 16 << 20

// file is servers.json: a JSON object from server name to definition,
// as e2b-mcp writes it. Several mcpbox processes may share it (a serve
// and the CLI): writers hold an flock on a lock file beside it and
// replace it whole by rename, readers notice a change by its mtime and
// size and read it again.
type file struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	servers map[string]Server // as last read
}

// load returns the definitions, reading the file again when it changed,
// and whether they changed since the last load.
func (f *file) load() (map[string]Server, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if errors.Is(err, os.ErrNotExist) {
		changed := f.servers == nil || len(f.servers) > 0
		f.servers, f.modTime, f.size = map[string]Server{}, time.Time{}, 0
		return f.servers, changed, nil
	}
	if err != nil {
		return nil, false, err
	}
	if f.servers != nil && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return f.servers, false, nil
	}
	servers, err := readFile(f.path)
	if err != nil {
		return nil, false, err
	}
	f.servers, f.modTime, f.size = servers, fi.ModTime(), fi.Size()
	return servers, true, nil
}

// readFile parses servers.json. A definition that fails its checks makes
// the whole file an error: silently dropping a server would be worse.
func readFile(path string) (map[string]Server, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "%s is larger than %d MiB", path, maxFileBytes>>20)
	}
	out := map[string]Server{}
	if len(bytes.TrimSpace(b)) == 0 {
		return out, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, mcpbox.Errorf(mcpbox.EINVALID, "%s is not a JSON object of server definitions: %v", path, err).
			WithSuggestion("fix it with `mcpbox server config --edit`, or start over with `mcpbox server config --reset`")
	}
	for name, r := range raw {
		var s Server
		if err := strictUnmarshal(r, &s); err != nil {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "%s: server %s: %v", path, name, err).
				WithSuggestion("use the fields command, env, install_commands, description, timeout_minutes, template, network, volumes, scope")
		}
		if s.Name != "" && s.Name != name {
			return nil, mcpbox.Errorf(mcpbox.EINVALID, "%s: server %s has the name field %q", path, name, s.Name)
		}
		s.Name = name
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out[name] = s
	}
	return out, nil
}

// reset empties the file under its lock, whatever it held: it is how a
// broken file is started over.
func (f *file) reset() error {
	return f.locked(func() error { return writeFile(f.path, map[string]Server{}) })
}

// locked runs fn holding the file's lock.
func (f *file) locked(fn func() error) error {
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(f.path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	return fn()
}

// update applies fn to the definitions on disk under the file's lock and
// writes the result (mode 0600: env may hold secrets).
func (f *file) update(fn func(map[string]Server) error) error {
	return f.locked(func() error {
		servers, err := readFile(f.path)
		if errors.Is(err, os.ErrNotExist) {
			servers, err = map[string]Server{}, nil
		}
		if err != nil {
			return err
		}
		if err := fn(servers); err != nil {
			return err
		}
		return writeFile(f.path, servers)
	})
}

func writeFile(path string, servers map[string]Server) error {
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	buf.WriteString("{")
	for i, n := range names {
		s := servers[n].clone()
		s.Name = "" // the key says it
		b, err := json.MarshalIndent(s, "  ", "  ")
		if err != nil {
			return err
		}
		k, _ := json.Marshal(n)
		if i > 0 {
			buf.WriteString(",")
		}
		fmt.Fprintf(&buf, "\n  %s: %s", k, b)
	}
	if len(names) > 0 {
		buf.WriteString("\n")
	}
	buf.WriteString("}\n")
	tmp, err := os.CreateTemp(filepath.Dir(path), ".servers-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sortedServers lists definitions by name.
func sortedServers(m map[string]Server) []Server {
	out := make([]Server, 0, len(m))
	for _, s := range m {
		out = append(out, s.clone())
	}
	slices.SortFunc(out, func(a, b Server) int { return cmpString(a.Name, b.Name) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
