//go:build tools

// Package mcpbox pins the code generators scripts/genproto.sh builds.
package mcpbox

import (
	_ "connectrpc.com/connect/cmd/protoc-gen-connect-go"
	_ "google.golang.org/protobuf/cmd/protoc-gen-go"
)
