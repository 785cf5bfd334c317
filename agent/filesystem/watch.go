package filesystem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	"github.com/mcpbox/mcpbox/gen/filesystempb"
)

// maxPolledEvents bounds what a polling watcher keeps between polls; older
// events are dropped first.
const maxPolledEvents = 4096

// watcher follows one directory (and, when recursive, its subdirectories,
// including ones created later) and reports events with names relative to
// it.
type watcher struct {
	root      string
	recursive bool
	fsw       *fsnotify.Watcher
	// entry, when set, describes the entry of each event (envd's
	// include_entry); nil leaves events without one.
	entry func(p string) (*filesystempb.EntryInfo, error)
}

func (s *Service) newWatcher(path string, recursive, includeEntry bool) (*watcher, error) {
	p, err := s.rpcPath(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(p); err != nil {
		return nil, rpcError(path, err)
	} else if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s is not a directory", path))
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("watch %s: %w", path, err))
	}
	w := &watcher{root: p, recursive: recursive, fsw: fsw}
	if includeEntry {
		w.entry = s.entry
	}
	if err := w.add(p); err != nil {
		fsw.Close()
		return nil, rpcError(path, err)
	}
	return w, nil
}

// add watches dir and, when recursive, every directory below it.
func (w *watcher) add(dir string) error {
	if !w.recursive {
		return w.fsw.Add(dir)
	}
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil // vanished meanwhile
		}
		if d.IsDir() {
			return w.fsw.Add(p)
		}
		return nil
	})
}

// next returns the next event, or an error once ctx ends or the watcher
// fails.
func (w *watcher) next(ctx context.Context) (*filesystempb.FilesystemEvent, error) {
	for {
		select {
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return nil, errors.New("watcher closed")
			}
			if w.recursive && ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					w.add(ev.Name)
				}
			}
			if out := w.convert(ev); out != nil {
				return out, nil
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return nil, errors.New("watcher closed")
			}
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (w *watcher) convert(ev fsnotify.Event) *filesystempb.FilesystemEvent {
	var t filesystempb.EventType
	switch {
	case ev.Has(fsnotify.Create):
		t = filesystempb.EventType_EVENT_TYPE_CREATE
	case ev.Has(fsnotify.Write):
		t = filesystempb.EventType_EVENT_TYPE_WRITE
	case ev.Has(fsnotify.Remove):
		t = filesystempb.EventType_EVENT_TYPE_REMOVE
	case ev.Has(fsnotify.Rename):
		t = filesystempb.EventType_EVENT_TYPE_RENAME
	case ev.Has(fsnotify.Chmod):
		t = filesystempb.EventType_EVENT_TYPE_CHMOD
	default:
		return nil
	}
	name, err := filepath.Rel(w.root, ev.Name)
	if err != nil {
		name = filepath.Base(ev.Name)
	}
	out := &filesystempb.FilesystemEvent{Name: name, Type: t}
	if w.entry != nil {
		// Not for an entry gone by now (removed, renamed away).
		if e, err := w.entry(ev.Name); err == nil {
			out.Entry = e
		}
	}
	return out
}

// WatchDir streams events under a directory until the client leaves.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	w, err := s.newWatcher(req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return err
	}
	defer w.fsw.Close()
	if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	interval := 50 * time.Second
	if n, err := strconv.Atoi(req.Header().Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		interval = time.Duration(n) * time.Second
	}
	events := make(chan *filesystempb.FilesystemEvent)
	errc := make(chan error, 1)
	go func() {
		for {
			ev, err := w.next(ctx)
			if err != nil {
				errc <- err
				return
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		var resp *filesystempb.WatchDirResponse
		select {
		case ev := <-events:
			resp = &filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: ev}}
		case <-tick.C:
			resp = &filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}}
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return connect.NewError(connect.CodeInternal, err)
		case <-ctx.Done():
			return nil
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// pollWatcher keeps a watcher's events for GetWatcherEvents.
type pollWatcher struct {
	w      *watcher
	cancel context.CancelFunc
	events chan *filesystempb.FilesystemEvent
}

// CreateWatcher starts a watcher whose events are collected by polling.
func (s *Service) CreateWatcher(_ context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	w, err := s.newWatcher(req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, err
	}
	b := make([]byte, 8)
	rand.Read(b)
	id := hex.EncodeToString(b)
	ctx, cancel := context.WithCancel(context.Background())
	pw := &pollWatcher{w: w, cancel: cancel, events: make(chan *filesystempb.FilesystemEvent, maxPolledEvents)}
	go func() {
		defer w.fsw.Close()
		for {
			ev, err := w.next(ctx)
			if err != nil {
				return
			}
			select {
			case pw.events <- ev:
			default: // full: drop the oldest to keep the newest
				select {
				case <-pw.events:
				default:
				}
				pw.events <- ev
			}
		}
	}()
	s.mu.Lock()
	s.watchers[id] = pw
	s.mu.Unlock()
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns and forgets the events collected so far.
func (s *Service) GetWatcherEvents(_ context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	s.mu.Lock()
	pw := s.watchers[req.Msg.GetWatcherId()]
	s.mu.Unlock()
	if pw == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no watcher %q", req.Msg.GetWatcherId()))
	}
	var out []*filesystempb.FilesystemEvent
	for {
		select {
		case ev := <-pw.events:
			out = append(out, ev)
			continue
		default:
		}
		break
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: out}), nil
}

// RemoveWatcher stops a polling watcher.
func (s *Service) RemoveWatcher(_ context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	s.mu.Lock()
	pw := s.watchers[req.Msg.GetWatcherId()]
	delete(s.watchers, req.Msg.GetWatcherId())
	s.mu.Unlock()
	if pw == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no watcher %q", req.Msg.GetWatcherId()))
	}
	pw.cancel()
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}
