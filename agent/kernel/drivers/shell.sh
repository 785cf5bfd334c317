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
# status 130, as Ctrl-C would; the shell and its state carry on. SIGINT is
# ignored between cells: one that came while `read` took in a request
# would lose what it had read. The agent interrupts only after "started";
# a late SIGINT, after the cell ended, finds it ignored again. (A cell's
# own INT trap lasts until the cell ends.)
trap '' INT
while :; do
  IFS= read -r -d '' __mcpbox_marker <&3 && IFS= read -r -d '' __mcpbox_cell <&3 || break # the agent closed fd 3
  trap 'return 130 2>/dev/null' INT
  printf '{"type":"started"}\n' >&4
  __mcpbox_run "$__mcpbox_cell"
  __mcpbox_rc=$?
  trap '' INT
  printf '%s' "$__mcpbox_marker"
  printf '%s' "$__mcpbox_marker" >&2
  printf '{"type":"done","exit_code":%d}\n' "$__mcpbox_rc" >&4
done
