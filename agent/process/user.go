package process

import (
	"encoding/base64"
	"fmt"
	"strings"

	"connectrpc.com/connect"
)

// user is who a process runs as. envd takes it from the request's
// Authorization header, Basic with the user name and an empty password:
// E2B's SDKs send "root:" for user: 'root' and nothing for the default
// user ("user", the Options' Uid).
type user struct {
	root bool
	// named is set when the request names its user: envd then starts a
	// process without a cwd in that user's home, not in DefaultCwd.
	named bool
}

// userOf reads the user from an Authorization header value.
func userOf(auth string) (user, error) {
	if auth == "" {
		return user{}, nil
	}
	b64, ok := strings.CutPrefix(auth, "Basic ")
	if !ok {
		return user{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the Authorization header names a user as Basic base64(\"name:\")"))
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return user{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the Authorization header is not base64: %v", err))
	}
	name, _, _ := strings.Cut(string(raw), ":")
	switch name {
	case "":
		return user{}, nil
	case "user":
		return user{named: true}, nil
	case "root":
		return user{root: true, named: true}, nil
	}
	return user{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unknown user %q: use user or root", name))
}
