package kernel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEventStream feeds a driver's event pipe with anything: the reply
// is NDJSON ending with one end_of_execution, carries only the event types
// of the wire, keeps each stream's text (exactly the limited prefix of
// what the valid lines said) and the results within their limits, and
// stays near MaxEvents lines.
func FuzzEventStream(f *testing.F) {
	for _, seed := range []string{
		"",
		`{"type":"stdout","text":"hi\n"}` + "\n" + `{"type":"done"}` + "\n",
		`{"type":"result","text":"1","png":"iVBOR","is_main_result":true}` + "\n",
		`{"type":"error","name":"E","value":"v","traceback":"t"}` + "\n" + `{"type":"return_value","value":{"a":[1,2]}}` + "\n",
		`{"type":"end_of_execution"}` + "\n" + `{"type":"number_of_executions","execution_count":9}` + "\n",
		`{"type":"stdout","text":"` + strings.Repeat("x", 300) + `"}` + "\n",
		`{"type":"result","text":"` + strings.Repeat("r", 190) + `"}` + "\n" + strings.Repeat(`{"type":"result","text":"s"}`+"\n", 30),
		strings.Repeat(`{"type":"stdout","text":"a"}`+"\n"+`{"type":"stderr","text":"b"}`+"\n", 20),
		`{"type":"stdout","text":"\u00e9\u4e16\ud83d\ude00` + strings.Repeat("\u00e9", 200) + `"}` + "\n",
		"{\"type\":\"stdout\",\"text\":\"\xff\xfe<>&\"}\n",
		"not json\n[1]\nnull\n{}\n{\"type\":1}\n\n",
		`{"type":"stdout","text":"half a line, the kernel died`,
		strings.Repeat("[", 300) + "\n",
		`{"type":"stdout","text":"` + strings.Repeat("\\u0001", 100) + `"}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	opts := Options{MaxOutputBytes: 256, MaxEventBytes: 200, MaxResultBytes: 512, MaxEvents: 8}
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf bytes.Buffer
		out := newReply(&buf, nil, &opts)
		k := &kernelProc{events: make(chan []kevent), dead: make(chan struct{})}
		k.readers.Add(1)
		go k.readEvents(newLineReader(bytes.NewReader(data), opts.MaxEventBytes))
		for batch := range k.events {
			for _, kev := range batch {
				out.kernelEvent(kev)
			}
			out.idle()
		}
		k.readers.Wait()
		out.finish()
		out.send(Event{"type": "end_of_execution"})

		lines := strings.SplitAfter(buf.String(), "\n")
		if lines[len(lines)-1] != "" {
			t.Fatalf("the reply does not end with a newline: %q", buf.String())
		}
		lines = lines[:len(lines)-1]
		if len(lines) > int(opts.MaxEvents)+4 {
			t.Errorf("%d lines, want at most MaxEvents (%d) and four more", len(lines), opts.MaxEvents)
		}
		var text [2]strings.Builder
		results := 0
		for i, line := range lines {
			var ev Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("line %d is not JSON: %v: %q", i, err, line)
			}
			typ, _ := ev["type"].(string)
			last := i == len(lines)-1
			if (typ == "end_of_execution") != last {
				t.Fatalf("end_of_execution at line %d of %d", i, len(lines))
			}
			switch typ {
			case "stdout", "stderr":
				s, _ := ev["text"].(string)
				if typ == "stderr" && i == len(lines)-2 && strings.HasPrefix(s, "\n[mcpbox: ") {
					break // the notes
				}
				if len(line) > 6*int(opts.MaxOutputBytes)+100 {
					t.Errorf("a %d-byte %s line", len(line), typ)
				}
				text[streamNumber(typ)].WriteString(s)
			case "result", "error", "return_value":
				results += len(line)
				if int64(len(line)) > opts.MaxEventBytes+1 {
					t.Errorf("a %d-byte %s line", len(line), typ)
				}
			case "end_of_execution":
			default:
				t.Errorf("a %q event reached the reply", typ)
			}
		}
		if int64(results) > opts.MaxResultBytes {
			t.Errorf("%d bytes of results, limit %d", results, opts.MaxResultBytes)
		}
		want := expectedText(data, opts)
		for i := range text {
			if got := text[i].String(); got != want[i] {
				t.Errorf("%s %q, want %q", streamNames[i], got, want[i])
			}
		}
	})
}

func streamNumber(typ string) int {
	if typ == "stderr" {
		return 1
	}
	return 0
}

// expectedText is what a reply's streams should say for data, worked out
// the plain way: whole lines within MaxEventBytes, each stream cut at
// MaxOutputBytes at a character's start.
func expectedText(data []byte, opts Options) [2]string {
	var all [2]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF && len(data) > 0 {
			return len(data), nil, bufio.ErrFinalToken // half a line: dropped
		}
		return 0, nil, nil
	})
	for sc.Scan() {
		line := sc.Bytes()
		if line == nil || int64(len(line)) > opts.MaxEventBytes {
			continue
		}
		var ev map[string]any
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		if typ, _ := ev["type"].(string); typ == "stdout" || typ == "stderr" {
			s, _ := ev["text"].(string)
			all[streamNumber(typ)] += s
		}
	}
	for i, s := range all {
		if int64(len(s)) > opts.MaxOutputBytes {
			cut := int(opts.MaxOutputBytes)
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			all[i] = s[:cut]
		}
	}
	return all
}
