# The two commands: `make run` and `make test`. See README.md.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help

GO ?= go
# Packages to vet, test and benchmark.
PKGS ?= ./...
# Benchmarks: which ones (-bench regexp) and for how long (-benchtime).
BENCH ?= .
BENCHTIME ?= 200x
# The version stamped into ./bin/mcpbox; empty keeps mcpbox.Version's default.
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-X github.com/mcpbox/mcpbox.Version=$(VERSION))
# Where `make install` puts mcpbox: $(DESTDIR)$(PREFIX)/bin/mcpbox.
PREFIX ?= /usr/local
# Extra arguments for `make run`, such as ARGS='--port 9000'.
ARGS ?=

.PHONY: help run test build install bench proto deps

help:
	@echo "make run      build, then serve MCP on http://127.0.0.1:8080/mcp and /sse (also /healthz, /readyz, /metrics)"
	@echo "make test     install what the tests need, go vet, then every test (-race)"
	@echo "make build    build ./bin/mcpbox, version $(or $(VERSION),default)"
	@echo "make install  build, then install it as $(DESTDIR)$(PREFIX)/bin/mcpbox (PREFIX=$(PREFIX))"
	@echo "make bench    run the Go benchmarks (BENCH=$(BENCH) BENCHTIME=$(BENCHTIME))"
	@echo "make proto    regenerate gen/ from proto/ (scripts/genproto.sh)"

# run builds the same binary `make build` does (same version), checks what
# sandboxes need on the host (installing it as root), then serves. Ctrl-C
# stops it, says which sessions it left running, and exits 0.
run: build
	@scripts/deps.sh --run || echo "deps: could not install what sandboxes need (see above); serving anyway"
	echo "== ./bin/mcpbox serve $(ARGS)  (Ctrl-C stops it)"
	exec ./bin/mcpbox serve $(ARGS)

deps:
	@scripts/deps.sh

# test runs vet, then every test verbosely into a log, then prints a
# summary: counts, what failed and what skipped and why. Tests that need
# root skip themselves elsewhere; CI runs this as root.
test: deps
	@log=$$(mktemp /tmp/mcpbox-test.XXXXXX)
	echo "== go vet $(PKGS)"
	if ! $(GO) vet $(PKGS); then echo; echo "make test: FAIL (go vet)"; exit 1; fi
	race=-race
	if [[ $$($(GO) env CGO_ENABLED) != 1 ]]; then
	  echo "warning: cgo is off (no C compiler): testing without -race"; race=
	fi
	echo "== go test $$race -count=1 -timeout 15m $(PKGS)  (log: $$log)"
	status=0
	$(GO) test $$race -count=1 -timeout 15m -v $(PKGS) 2>&1 | tee "$$log" || status=$$?
	echo
	echo "== summary"
	awk '/^ *--- PASS/ {p++} /^ *--- FAIL/ {f++} /^ *--- SKIP/ {s++}
	  END {printf "tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$$log"
	grep -E '^(ok|FAIL)[[:space:]]+github.com/' "$$log" | sed 's/^/  /' || true
	awk '/^ +[^ ]+\.go:[0-9]+: / {last=$$0} /^ *--- SKIP/ {sub(/^ +/, "", last); print "  skip " $$3 ": " last; last=""}' "$$log"
	grep -E '^ *--- FAIL' "$$log" | sed 's/^ */  /' || true
	if (( status == 0 )); then echo "make test: PASS"; else echo "make test: FAIL (go test exit $$status; full log: $$log)"; fi
	exit $$status

build:
	@echo "== go build -o bin/mcpbox ./cmd/mcpbox (version $(or $(VERSION),default); the first build downloads modules and compiles for a minute or two)"
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/mcpbox ./cmd/mcpbox

install: build
	@install -d '$(DESTDIR)$(PREFIX)/bin'
	install -m 0755 bin/mcpbox '$(DESTDIR)$(PREFIX)/bin/mcpbox'
	echo "installed $(DESTDIR)$(PREFIX)/bin/mcpbox ($$('$(DESTDIR)$(PREFIX)/bin/mcpbox' version | head -1))"

bench: deps
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCHTIME) $(PKGS)

proto:
	scripts/genproto.sh
