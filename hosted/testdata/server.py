# A stdio MCP server written with the standard library only, whose
# behaviour the tests control: what env it received, crashing on demand,
# a slow start, a tool list that changes, progress and cancellation;
# and prompts and resources (named after $WHO, to tell servers apart).
import json, os, sys, threading, time

out_lock = threading.Lock()
tools = [
    {"name": "env", "description": "the value of an environment variable", "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
    {"name": "crash", "description": "exit at once, with a word on stderr", "inputSchema": {"type": "object"}},
    {"name": "count", "description": "a counter kept between calls", "inputSchema": {"type": "object"}},
    {"name": "echo", "description": "the arguments it got", "inputSchema": {"type": "object"}},
    {"name": "slow", "description": "steps with progress, until done or cancelled", "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer"}}}},
    {"name": "cancelled", "description": "the request ids cancelled so far", "inputSchema": {"type": "object"}},
    {"name": "add_tool", "description": "add a tool and say the list changed", "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
    {"name": "installs", "description": "how many times the install command ran in this sandbox", "inputSchema": {"type": "object"}},
]
who = os.environ.get("WHO", "server")
prompts = [
    {"name": "greet", "description": "a greeting", "arguments": [{"name": "whom", "description": "who is greeted", "required": True}]},
]
resources = [
    {"uri": "test://static/hello", "name": "hello", "mimeType": "text/plain"},
    {"uri": "test://%s/who" % who, "name": "who", "description": "the server's $WHO", "mimeType": "text/plain"},
]
templates = [
    {"uriTemplate": "test://%s/echo/{text}" % who, "name": "echo", "mimeType": "text/plain"},
]
if os.environ.get("BAD_LISTS"):
    # What mcpbox must skip, not choke on.
    prompts.append(None)
    resources[1:1] = [None, {"uri": "no scheme", "name": "bad"}]
    templates += [None, {"uriTemplate": "test://%s/{bad" % who, "name": "bad"}]
counter = 0
cancelled = set()

def send(msg):
    with out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

def text(s, is_error=False):
    return {"content": [{"type": "text", "text": str(s)}], "isError": is_error}

def slow(req):
    args = req["params"].get("arguments") or {}
    token = (req["params"].get("_meta") or {}).get("progressToken")
    steps = int(args.get("steps", 5))
    for i in range(1, steps + 1):
        if i > 1:
            time.sleep(0.05)
        if req["id"] in cancelled:
            return  # cancelled: no answer, as the spec says
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": i, "total": steps, "message": "step %d" % i}})
    # The result right behind the last progress, as real servers do.
    send({"jsonrpc": "2.0", "id": req["id"], "result": text("done %d" % steps)})

def call(req):
    global counter
    name = req["params"]["name"]
    args = req["params"].get("arguments") or {}
    if name == "env":
        return text(os.environ.get(args.get("name", ""), "<unset>"))
    if name == "crash":
        sys.stderr.write("dying on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "count":
        counter += 1
        return text(counter)
    if name == "echo":
        return {"content": [{"type": "text", "text": json.dumps(args, sort_keys=True)}], "structuredContent": args}
    if name == "cancelled":
        return text(json.dumps(sorted(str(c) for c in cancelled)))
    if name == "add_tool" and args.get("prompt"):
        # With "prompt": true, a prompt instead (the tool list stays as
        # the tests of the tools expect it).
        prompts.append({"name": args["name"], "description": "added"})
        send({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"})
        return text("added")
    if name == "add_tool":
        tools.append({"name": args["name"], "description": "added", "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("added")
    if name == "installs":
        path = os.path.join(os.environ["HOME"], "installs") if os.environ.get("INSTALLS_IN_HOME") else "installs"
        try:
            with open(path) as f:
                return text(len(f.read().splitlines()))
        except OSError:
            return text(0)
    return text("unknown tool " + name, True)

def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        method = req.get("method")
        if method == "initialize":
            time.sleep(float(os.environ.get("SLOW_START", "0")))
            if os.environ.get("EARLY_LIST_CHANGED"):
                # Before the handshake ends, as some servers do.
                send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            send({"jsonrpc": "2.0", "id": req["id"], "result": {
                "protocolVersion": req["params"]["protocolVersion"],
                # TOOLS_ONLY declares tools only; the prompts and
                # resources are still served, to show no one asks.
                "capabilities": {"tools": {"listChanged": True}} if os.environ.get("TOOLS_ONLY") else
                    {"tools": {"listChanged": True}, "prompts": {"listChanged": True}, "resources": {"listChanged": True}},
                "serverInfo": {"name": "pytest-server", "version": "1"}}})
        elif method == "tools/list":
            # Two tools a page, to make the client follow cursors.
            start = int((req.get("params") or {}).get("cursor") or 0)
            page = {"tools": tools[start:start + 2]}
            if start + 2 < len(tools):
                page["nextCursor"] = str(start + 2)
            send({"jsonrpc": "2.0", "id": req["id"], "result": page})
        elif method == "tools/call":
            if req["params"]["name"] == "slow":
                threading.Thread(target=slow, args=(req,), daemon=True).start()
            else:
                send({"jsonrpc": "2.0", "id": req["id"], "result": call(req)})
        elif method == "prompts/list":
            send({"jsonrpc": "2.0", "id": req["id"], "result": {"prompts": prompts}})
        elif method == "prompts/get":
            p = req["params"]
            if not any(x["name"] == p["name"] for x in prompts):
                send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32602, "message": "no prompt " + p["name"]}})
                continue
            whom = (p.get("arguments") or {}).get("whom", "nobody")
            send({"jsonrpc": "2.0", "id": req["id"], "result": {"description": "greeting from " + who, "messages": [
                {"role": "user", "content": {"type": "text", "text": "%s greets %s with %s" % (who, whom, p["name"])}}]}})
        elif method == "resources/list":
            # One resource a page, to make the client follow cursors.
            start = int((req.get("params") or {}).get("cursor") or 0)
            page = {"resources": resources[start:start + 1]}
            if start + 1 < len(resources):
                page["nextCursor"] = str(start + 1)
            send({"jsonrpc": "2.0", "id": req["id"], "result": page})
        elif method == "resources/templates/list":
            send({"jsonrpc": "2.0", "id": req["id"], "result": {"resourceTemplates": templates}})
        elif method == "resources/read":
            uri = req["params"]["uri"]
            body = None
            if uri == "test://static/hello":
                body = "hello from " + who
            elif uri == "test://%s/who" % who:
                body = who
            elif uri.startswith("test://%s/echo/" % who):
                body = uri[len("test://%s/echo/" % who):]
            if body is None:
                send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32002, "message": "resource not found", "data": {"uri": uri}}})
            else:
                send({"jsonrpc": "2.0", "id": req["id"], "result": {"contents": [{"uri": uri, "mimeType": "text/plain", "text": body}]}})
        elif method == "notifications/cancelled":
            cancelled.add(req["params"]["requestId"])
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": req["id"], "result": {}})
        elif "id" in req and method is not None:
            send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "method not found: " + method}})

main()
