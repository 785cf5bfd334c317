#!/usr/bin/env bash
# bench-compare.sh runs the same Go benchmarks on a base commit and on the
# work tree, in turn, ROUNDS times: both meet the same machine at the same
# moments, so a noisy neighbour weighs on each alike. It prints every
# metric's median per side and their ratio (head / base).
#
#   scripts/bench-compare.sh BASE PKG BENCH [BENCHTIME] [ROUNDS]
#   scripts/bench-compare.sh a7f12e4 ./manager/ BenchmarkSessionCreate 40x 3
set -euo pipefail
base=${1:?base commit} pkg=${2:?package} bench=${3:?benchmark regexp}
benchtime=${4:-100x} rounds=${5:-3}
top=$(git rev-parse --show-toplevel)
cd "$top"
sha=$(git rev-parse --short "$base")
tree=${TMPDIR:-/tmp}/mcpbox-base-$sha
if [[ ! -d $tree ]]; then
  echo "bench-compare: checking out $sha in $tree" >&2
  git worktree add --detach "$tree" "$sha" >/dev/null
  # The base's e2e clients are the same npm packages: share them.
  [[ -d e2e/node_modules && ! -e $tree/e2e/node_modules ]] && ln -s "$top/e2e/node_modules" "$tree/e2e/node_modules"
fi
out=$(mktemp)
for ((i = 1; i <= rounds; i++)); do
  for side in base head; do
    dir=$top
    [[ $side == base ]] && dir=$tree
    echo "bench-compare: round $i/$rounds, $side" >&2
    (cd "$dir" && go test -run '^$' -bench "$bench" -benchtime "$benchtime" -count 1 "$pkg") 2>&1 |
      awk -v side="$side" '/^Benchmark/ {print side, $0}' | tee -a "$out" >&2
  done
done
# Each line: side name iterations value unit value unit ...; medians per
# (benchmark, unit, side).
awk '
  { name = $2; sub(/-[0-9]+$/, "", name)
    for (f = 4; f + 1 <= NF; f += 2) { key = name SUBSEP $(f + 1); v[key, $1, ++n[key, $1]] = $f; keys[key] = 1 } }
  function median(key, side,   c, i, j, t, a) {
    c = n[key, side]; for (i = 1; i <= c; i++) a[i] = v[key, side, i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 }
  END {
    for (key in keys) { split(key, k, SUBSEP); b = median(key, "base"); h = median(key, "head")
      printf "%-60s %-14s %12.4g %12.4g %8s\n", k[1], k[2], b, h, (b > 0 ? sprintf("%.2f", h / b) : "-") } }
' "$out" | sort | { printf "%-60s %-14s %12s %12s %8s\n" benchmark metric base head ratio; cat; }
rm -f "$out"
