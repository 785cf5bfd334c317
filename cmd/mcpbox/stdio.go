package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// JSON-RPC error codes for what never reaches the MCP SDK.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
)

// stdioFilter stands between a stdio client and the MCP SDK: every line
// that is not a well-formed JSON-RPC message (bad JSON, a bare value, the
// wrong version, an id that is neither a string nor a number, a line past
// the size limit) gets its JSON-RPC error reply here and is dropped, and
// the server carries on — the SDK would end the whole session on it,
// dropping every call in flight.
type stdioFilter struct {
	in  *bufio.Reader
	out *lockedWriter
	max int
	buf bytes.Buffer // validated lines not yet read by the SDK
}

// lockedWriter serialises whole writes: the SDK writes each message with
// one Write, and so do the filter's error replies.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (*lockedWriter) Close() error { return nil }

func newStdioFilter(r io.Reader, w *lockedWriter, maxLine int) *stdioFilter {
	return &stdioFilter{in: bufio.NewReaderSize(r, 64<<10), out: w, max: maxLine}
}

func (f *stdioFilter) Read(p []byte) (int, error) {
	for f.buf.Len() == 0 {
		line, err := f.line()
		if len(bytes.TrimSpace(line)) > 0 {
			if id, code, msg := check(line); code != 0 {
				f.reply(id, code, msg)
			} else {
				f.buf.Write(line)
				f.buf.WriteByte('\n')
			}
		}
		if err != nil && f.buf.Len() == 0 {
			return 0, err
		}
		if err != nil {
			break
		}
	}
	return f.buf.Read(p)
}

// errLineTooLong marks a line past the limit; what was read is dropped.
var errLineTooLong = errors.New("line too long")

// line reads up to the next newline, at most f.max bytes kept; a longer
// line is answered and skipped without being held.
func (f *stdioFilter) line() ([]byte, error) {
	var line []byte
	for {
		chunk, err := f.in.ReadSlice('\n')
		if len(line)+len(chunk) > f.max {
			line = nil
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = f.in.ReadSlice('\n')
			}
			f.reply(nil, rpcParseError, fmt.Sprintf("Parse error: message longer than %d bytes", f.max))
			if err != nil {
				return nil, err
			}
			return nil, nil
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

func (f *stdioFilter) reply(id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	f.out.Write(append(b, '\n'))
}

// check says what is wrong with one line as a JSON-RPC message, if
// anything: the id to answer with, a code and a message (code 0: fine).
func check(line []byte) (json.RawMessage, int, string) {
	if !json.Valid(line) {
		return nil, rpcParseError, "Parse error: the line is not valid JSON; send one JSON-RPC message per line"
	}
	trimmed := bytes.TrimSpace(line)
	if trimmed[0] == '[' {
		var batch []json.RawMessage
		json.Unmarshal(trimmed, &batch)
		if len(batch) == 0 {
			return nil, rpcInvalidRequest, "Invalid Request: an empty batch"
		}
		for _, m := range batch {
			if id, code, msg := checkObject(m); code != 0 {
				return id, code, msg
			}
		}
		return nil, 0, ""
	}
	return checkObject(trimmed)
}

func checkObject(m json.RawMessage) (json.RawMessage, int, string) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(m, &obj) != nil {
		return nil, rpcInvalidRequest, "Invalid Request: a JSON-RPC message is a JSON object"
	}
	id, hasID := obj["id"]
	if hasID {
		var v any
		json.Unmarshal(id, &v)
		switch v.(type) {
		case string, float64:
		case nil:
			hasID = false
		default:
			return nil, rpcInvalidRequest, "Invalid Request: id must be a string or a number"
		}
	}
	if !hasID {
		id = nil
	}
	var version string
	if json.Unmarshal(obj["jsonrpc"], &version) != nil || version != "2.0" {
		return id, rpcInvalidRequest, `Invalid Request: "jsonrpc" must be "2.0"`
	}
	var method string
	_, isResult := obj["result"]
	_, isError := obj["error"]
	if json.Unmarshal(obj["method"], &method) != nil || method == "" {
		if !isResult && !isError {
			return id, rpcInvalidRequest, "Invalid Request: a message needs a method, a result or an error"
		}
	}
	return nil, 0, ""
}
