#!/usr/bin/env bash
# Installs what the tests need, when it is missing: the interpreters of the
# host template (sandboxes see the host's /usr), the tools the tests call,
# a C compiler for `go test -race`, and the Go modules.
#
# As root on Debian or Ubuntu it installs missing packages with apt-get
# (running `apt-get update` only when something is missing). Otherwise it
# prints what to install and carries on: the tests that need a missing piece
# skip with a message. Safe to run again; fast when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

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
  "python3 python3"   # the Python language, tests' baselines
  "node nodejs"       # the JavaScript language
  "npm npm"           # installs the end-to-end MCP clients
  "ps procps"         # tools the containment tests run inside sandboxes
  "unshare util-linux"
  "ip iproute2"
  "gcc gcc"           # cgo, which go test -race needs
)
missing=()
for n in "${needs[@]}"; do
  read -r prog pkg <<<"$n"
  have "$prog" || missing+=("$pkg")
done
# The Python kernel's plot path is tested with Debian's matplotlib.
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || missing+=(python3-matplotlib)
# cgo needs libc's headers too (a Recommends of gcc, so not always there).
[[ -e /usr/include/stdlib.h ]] || missing+=(libc6-dev)

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >/dev/null
  else
    echo "deps: missing: ${missing[*]}" >&2
    echo "deps: install them with: sudo apt-get install ${missing[*]}" >&2
    echo "deps: carrying on; tests that need them will skip or fail with a message" >&2
  fi
fi

go mod download

# The end-to-end clients (MCP TypeScript SDK, Inspector, conformance suite,
# Node 22) come from npm, pinned by e2e/package-lock.json.
if ! command -v npm >/dev/null; then
  echo "deps: npm is missing: install Debian's nodejs and npm; e2e tests will fail" >&2
elif ! (cd e2e && npm ls --depth=0 >/dev/null 2>&1); then
  echo "deps: installing the end-to-end clients from npm"
  (cd e2e && npm ci --no-audit --no-fund --loglevel=error)
fi
