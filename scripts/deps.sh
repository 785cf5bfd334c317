#!/usr/bin/env bash
# Installs what mcpbox needs on the host, when it is missing.
#
#   scripts/deps.sh         what the tests need (make test, make bench): the
#                           interpreters of the host template (sandboxes see
#                           the host's /usr), matplotlib for plots, the tools
#                           the tests call, a C compiler for `go test -race`,
#                           the Go modules and the npm end-to-end clients
#   scripts/deps.sh --run   what sandboxes need to serve users (make run):
#                           python3, node and matplotlib in the host template
#
# As root on Debian or Ubuntu it installs missing packages with apt-get
# (running `apt-get update` only when something is missing). Otherwise it
# prints what to install and carries on: what needs a missing piece fails
# or skips with a message. Every step that takes a while says so first.
# Safe to run again; fast when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=test
[[ ${1:-} == --run ]] && profile=run

# have PROG: PROG is an executable in one of the system directories.
# PATH is not used: sandboxes see /usr, not the caller's PATH (pyenv, nvm).
have() {
  local d
  for d in /usr/local/bin /usr/bin /bin /usr/sbin /sbin; do
    [[ -x $d/$1 ]] && return 0
  done
  return 1
}

# needs: "program package" pairs, checked in order.
needs=(
  "python3 python3"   # the Python language
  "node nodejs"       # the JavaScript language
)
if [[ $profile == test ]]; then
  needs+=(
    "npm npm"           # installs the end-to-end MCP clients
    "ps procps"         # tools the containment tests run inside sandboxes
    "unshare util-linux"
    "ip iproute2"
    "gcc gcc"           # cgo, which go test -race needs
    "mmdebstrap mmdebstrap" # builds the Debian templates the template tests run
  )
fi
missing=()
for n in "${needs[@]}"; do
  read -r prog pkg <<<"$n"
  have "$prog" || missing+=("$pkg")
done
# Plots: matplotlib in the host template's python3 (sandboxes run the
# host's /usr/bin/python3, whatever python3 comes first on PATH here).
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  missing+=(python3-matplotlib)
fi
# cgo needs libc's headers too (a Recommends of gcc, so not always there).
[[ $profile == run || -e /usr/include/stdlib.h ]] || missing+=(libc6-dev)

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    echo "deps: missing ${missing[*]}"
    echo "deps: apt-get update (quiet; this can take a minute)"
    apt-get update -qq </dev/null
    echo "deps: apt-get install ${missing[*]} (quiet; this can take a few minutes)"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
    echo "deps: installed ${missing[*]}"
  else
    echo "deps: missing: ${missing[*]}" >&2
    echo "deps: install them with: sudo apt-get install ${missing[*]}" >&2
    if [[ $profile == run ]]; then
      echo "deps: carrying on; code that needs them fails in sandboxes (mcpbox doctor says what each language lacks)" >&2
    else
      echo "deps: carrying on; tests that need them will skip or fail with a message" >&2
    fi
  fi
fi

[[ $profile == run ]] && exit 0

echo "deps: go mod download (quiet; the first time it fetches every module)"
go mod download

# The end-to-end clients (MCP TypeScript SDK, Inspector, conformance suite,
# Node 22) come from npm, pinned by e2e/package-lock.json.
if ! command -v npm >/dev/null; then
  echo "deps: npm is missing: install Debian's nodejs and npm; e2e tests will fail" >&2
elif ! (cd e2e && npm ls --depth=0 >/dev/null 2>&1); then
  echo "deps: npm ci in e2e/ (the end-to-end MCP clients; this can take a minute)"
  (cd e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "deps: ready"
