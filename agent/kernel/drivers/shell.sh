# The shell kernel driver: one persistent bash per context, started as
# `bash --noprofile --norc -c <this file>`. Cells arrive on fd 3 as
# "marker NUL code NUL" and run with eval in this shell, so cwd, exported
# variables, aliases and functions survive between cells (a cell runs
# inside __mcpbox_run, so `declare`/`local` there make locals). After each
# cell the marker goes to fd 1 and fd 2 (so the agent knows it has all the
# output) and a JSON line with the exit status to fd 4. A cell that runs
# `exit` ends this shell; the agent reports it and starts a fresh one.
shopt -s expand_aliases
__mcpbox_run() { eval "$1"; }
# An interrupt (the agent's timeout) abandons the rest of the cell with
# status 130, as Ctrl-C would; the shell and its state carry on.
trap 'return 130 2>/dev/null' INT
while :; do
  IFS= read -r -d '' __mcpbox_marker <&3 && IFS= read -r -d '' __mcpbox_cell <&3
  __mcpbox_rc=$?
  if [ "$__mcpbox_rc" -ne 0 ]; then
    [ "$__mcpbox_rc" -gt 128 ] && continue # a stray interrupt between cells
    break                                  # the agent closed fd 3
  fi
  __mcpbox_run "$__mcpbox_cell"
  __mcpbox_rc=$?
  printf '%s' "$__mcpbox_marker"
  printf '%s' "$__mcpbox_marker" >&2
  printf '{"type":"done","exit_code":%d}\n' "$__mcpbox_rc" >&4
done
