# The Python kernel driver: one per context, started by the agent as
# `python3 -u -c <this file>`. Requests arrive as JSON lines on fd 3 and
# events leave as JSON lines on fd 4, so the user's own stdout (fd 1) is
# never part of the protocol. print() and sys.stderr go through fd 4, in
# order; what is written to fd 1/2 directly (C extensions, subprocesses)
# reaches the agent through those pipes, and a marker written to both at
# the end of each cell tells the agent it has all of it.
# Start-up is on the path of every first execution, so only what every
# cell needs is imported here: _ast is built in (the ast module costs
# milliseconds), and base64 and traceback load when a cell needs them.
import _ast, _signal, io, os, sys

# The protocol's JSON goes through the C codec behind the json module:
# importing json imports re, a third of this driver's start-up. Where _json
# lacks what this needs (another Python), the json module does the work.
try:
    import _json

    class _JSONContext:
        strict = False
        object_hook = object_pairs_hook = None
        parse_float, parse_int, parse_constant = float, int, float

    _scan = _json.make_scanner(_JSONContext())
    _encode = _json.make_encoder(None, str, _json.encode_basestring_ascii, None, ":", ",", False, False, True)

    def _loads(s):
        return _scan(s, 0)[0]

    def _dumps(v):
        return "".join(_encode(v, 0))

    _dumps({"check": [1, 2.5, None, True, "\u00e9"]})
except Exception:
    import json

    _loads = json.loads

    def _dumps(v):
        return json.dumps(v, default=str)

_req = os.fdopen(3, "r", encoding="utf-8")
_ev = os.fdopen(4, "w", encoding="utf-8", errors="surrogateescape")


# Output is flushed as it is written, so it streams; what only comes at a
# cell's end (results, errors) waits in the buffer for "done": one write.
def _send(_flush=True, **ev):
    _ev.write(_dumps(ev) + "\n")
    if _flush:
        _ev.flush()


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr: each write becomes an event."""

    def __init__(self, name, fd):
        self.name, self._fd = name, fd

    def writable(self):
        return True

    def write(self, s):
        if s:
            _send(type=self.name, text=s)
        return len(s)

    def fileno(self):
        return self._fd

    def isatty(self):
        return False


sys.stdout = _Stream("stdout", 1)
sys.stderr = _Stream("stderr", 2)
_globals = {"__name__": "__main__", "__builtins__": __builtins__}
_MIME = [("text/html", "_repr_html_", "html"), ("text/markdown", "_repr_markdown_", "markdown"),
         ("image/svg+xml", "_repr_svg_", "svg"), ("image/png", "_repr_png_", "png"),
         ("image/jpeg", "_repr_jpeg_", "jpeg"), ("application/json", "_repr_json_", "json"),
         ("text/latex", "_repr_latex_", "latex")]


def _result(value, main):
    r = {"type": "result", "text": repr(value), "is_main_result": main}
    for _, method, field in _MIME:
        fn = getattr(value, method, None)
        if callable(fn):
            try:
                out = fn()
            except Exception:
                continue
            if out is None:
                continue
            if isinstance(out, bytes):
                import base64
                out = base64.b64encode(out).decode()
            elif field == "json":
                out = _loads(_dumps(out))
            r[field] = out
    _send(False, **r)


def _figures():
    """Figures left open (or shown) at the end of a cell, as PNG results."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    import base64
    for num in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png")
        _send(False, type="result", png=base64.b64encode(buf.getvalue()).decode(), text="<Figure>", is_main_result=False)
    plt.close("all")


def _error(exc):
    import traceback
    tb = exc.__traceback__
    # Drop the driver's own frames: the user's code starts at a cell.
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
        tb = tb.tb_next
    # Let the traceback quote the cells' source lines.
    import linecache
    for name, src in _sources.items():
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    lines = traceback.format_exception(type(exc), exc, tb)
    _send(False, type="error", name=type(exc).__name__, value=str(exc), traceback="".join(lines))


# Cell sources by file name, so tracebacks through code defined in an
# earlier cell still show its lines. Only the newest are kept.
_sources = {}
_cells = 0


def _run(code):
    global _cells
    _cells += 1
    name = "<cell-%d>" % _cells
    _sources[name] = code
    if len(_sources) > 1000:
        del _sources[next(iter(_sources))]
    tree = compile(code, name, "exec", _ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    if tree.body:
        exec(compile(tree, name, "exec"), _globals)
    if last is not None:
        value = eval(compile(last, name, "eval"), _globals)
        if value is not None:
            _result(value, True)


def _handler(event, timeout):
    """Lambda-style: call handler(event, context) and send its JSON value.
    The context counts down from the cell's timeout."""
    import time, uuid
    fn = _globals.get("handler")
    if not callable(fn):
        raise NameError("handler mode needs a function handler(event, context)")
    deadline = time.monotonic() + float(timeout or 30)

    class Context:
        aws_request_id = str(uuid.uuid4())
        function_name = "handler"

        def get_remaining_time_in_millis(self):
            return max(0, int((deadline - time.monotonic()) * 1000))

    value = fn(event, Context())
    try:
        import json
        text = json.dumps(value)
    except (TypeError, ValueError):
        raise TypeError("handler returned a %s, which cannot be encoded as JSON" % type(value).__name__) from None
    _send(False, type="return_value", value=_loads(text))


def _exit(exc):
    """sys.exit() in a cell ends the kernel as it would end python, with
    its status; the agent reports it and the next call starts afresh."""
    code = exc.code
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        sys.stderr.write(str(code) + "\n")
        status = 1
    _ev.flush()
    os._exit(status)


# SIGINT interrupts a running cell and nothing else. The agent sends it
# only between a cell's "started" and its "done", but it may land late,
# after the cell ended, while the driver reads the next request: there an
# exception would lose the request (TextIOWrapper decodes it in Python
# code) or, outside any try, end the driver. So the handler raises only
# while a cell runs, and only once per cell: after it raised, no later
# SIGINT can raise in the driver's own code that reports the interrupt.
_running = False
# A SIGINT handler a cell installed: it stays in charge during cells.
_user_sigint = None


def _on_sigint(signum, frame):
    global _running
    if not _running:
        return
    _running = False
    h = _user_sigint
    if callable(h) and h is not _signal.default_int_handler:
        return h(signum, frame)
    if h == _signal.SIG_IGN:
        return
    raise KeyboardInterrupt


_signal.signal(_signal.SIGINT, _on_sigint)


def _cell(req):
    """Runs one cell with SIGINT armed. On return, or on any exception,
    _running is False: a KeyboardInterrupt landing in the finally, before
    the store, was raised by the handler, which cleared it."""
    global _running
    try:
        _running = True
        _send(type="started")
        _run(req["code"])
        if "event" in req:
            _handler(req["event"], req.get("timeout"))
        _figures()
    finally:
        _running = False


def _rearm():
    """Puts the driver's SIGINT handler back if a cell replaced it, keeping
    the cell's handler for later cells."""
    global _user_sigint
    h = _signal.getsignal(_signal.SIGINT)
    if h is not _on_sigint:
        _user_sigint = h
        _signal.signal(_signal.SIGINT, _on_sigint)


_FONTS_CONF = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>/usr/share/fonts</dir>
  <dir>/usr/local/share/fonts</dir>
  <dir prefix="xdg">fonts</dir>
  <cachedir prefix="xdg">fontconfig</cachedir>
</fontconfig>
"""


def _fontconfig():
    """Gives fontconfig a configuration when the sandbox's /etc has none.
    matplotlib runs fc-list to find fonts, and without one fc-list prints
    "Fontconfig error: Cannot load default config file" on the cell's
    stderr at every first plot. The file lives in the user's cache, where
    matplotlib and fontconfig keep theirs."""
    if "FONTCONFIG_FILE" in os.environ or os.path.exists("/etc/fonts/fonts.conf"):
        return
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(cache, "mcpbox", "fonts.conf")
    if not os.path.exists(path):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = "%s.%d" % (path, os.getpid())
            with open(tmp, "w") as f:
                f.write(_FONTS_CONF)
            os.replace(tmp, path)
        except OSError:
            return
    os.environ["FONTCONFIG_FILE"] = path


def _main():
    _fontconfig()
    while True:
        line = _req.readline()
        if not line:
            return
        req = _loads(line)
        # A call's env vars hold for that call only (the code
        # interpreter's env_vars); what they hid comes back after.
        saved = {k: os.environ.get(k) for k in (req.get("env") or {})}
        for k, v in (req.get("env") or {}).items():
            os.environ[k] = v
        try:
            _cell(req)
        except SystemExit as exc:
            _exit(exc)
        except BaseException as exc:  # KeyboardInterrupt too
            _error(exc)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _rearm()
            sys.stdout.flush()
            os.write(1, req["marker"].encode())
            os.write(2, req["marker"].encode())
            _send(type="done")


# Run as a script (python3 -c SOURCE); imported as a module, the importer
# calls _main once the import is done.
if __name__ == "__main__":
    _main()
