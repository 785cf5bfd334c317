package manager_test

import (
	"errors"

	"github.com/mcpbox/mcpbox"
)

func asError(err error, target **mcpbox.Error) bool { return errors.As(err, target) }

var sessionsRunning = mcpbox.SessionFilter{States: []mcpbox.SessionState{mcpbox.SessionRunning}}
