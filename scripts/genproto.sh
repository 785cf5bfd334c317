#!/usr/bin/env bash
# Regenerates gen/ from proto/. Needs protoc (Debian: protobuf-compiler);
# the Go plugins are pinned by go.mod and built here.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go
GOBIN=$bin go install connectrpc.com/connect/cmd/protoc-gen-connect-go
rm -rf gen
mkdir -p gen
PATH=$bin:$PATH protoc -I proto \
  --go_out=. --go_opt=module=github.com/mcpbox/mcpbox \
  --connect-go_out=. --connect-go_opt=module=github.com/mcpbox/mcpbox \
  process/process.proto filesystem/filesystem.proto
