package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/mcpbox/mcpbox/agent/process"
)

// handleMcpbox adds the routes that are mcpbox's own, not envd's, to mux.
// They answer JSON; errors are {"message": ...}.
func (a *Agent) handleMcpbox(mux *http.ServeMux) {
	mux.HandleFunc("GET /mcpbox/v1/processes/{tag}/output", a.processOutput)
	mux.HandleFunc("DELETE /mcpbox/v1/processes/{tag}", a.forgetProcess)
	mux.HandleFunc("GET /mcpbox/v1/deadline", a.getDeadline)
	mux.HandleFunc("PUT /mcpbox/v1/deadline", a.putDeadline)
	// envd's GET /envs: the environment every process starts with. E2B's
	// code interpreter reads the sandbox's env vars from it.
	mux.HandleFunc("GET /envs", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, a.proc.Env())
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"message": msg})
}

func (a *Agent) processOutput(w http.ResponseWriter, r *http.Request) {
	out, err := a.proc.Output(r.PathValue("tag"))
	if err != nil {
		writeJSONError(w, statusOf(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *Agent) forgetProcess(w http.ResponseWriter, r *http.Request) {
	if err := a.proc.Forget(r.PathValue("tag")); err != nil {
		writeJSONError(w, statusOf(err), err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, process.ErrUnknownTag):
		return http.StatusNotFound
	case errors.Is(err, process.ErrRunning):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// deadlineBody is the JSON of the deadline routes; a nil Deadline is
// null: none.
type deadlineBody struct {
	Deadline *time.Time `json:"deadline"`
}

func (a *Agent) getDeadline(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.deadlineBody())
}

func (a *Agent) deadlineBody() deadlineBody {
	var b deadlineBody
	if at := a.deadline.get(); !at.IsZero() {
		at = at.UTC()
		b.Deadline = &at
	}
	return b
}

func (a *Agent) putDeadline(w http.ResponseWriter, r *http.Request) {
	const usage = `the body is {"deadline": "<RFC 3339 time>"}, or {"deadline": null} for none`
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<10))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "read body: "+err.Error())
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		writeJSONError(w, http.StatusBadRequest, "bad JSON: "+err.Error()+"; "+usage)
		return
	}
	field, ok := fields["deadline"]
	if !ok {
		writeJSONError(w, http.StatusBadRequest, "no deadline field: "+usage)
		return
	}
	var at time.Time
	if !bytes.Equal(field, []byte("null")) {
		if err := json.Unmarshal(field, &at); err != nil {
			writeJSONError(w, http.StatusBadRequest, "bad deadline: "+err.Error()+"; "+usage)
			return
		}
	}
	if !a.deadline.set(at) {
		writeJSONError(w, http.StatusConflict, "the deadline has passed: the sandbox is ending")
		return
	}
	a.log.Info("deadline set", "deadline", at)
	writeJSON(w, http.StatusOK, a.deadlineBody())
}
