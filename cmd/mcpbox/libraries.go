package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// library is an optional library of a language: present in the host
// template (the host's /usr, which sandboxes see) or not. Sandboxes have
// no network, so what the host lacks cannot be installed from inside.
type library struct {
	name, pkg string // the import name, and the Debian package that has it
}

// optionalLibraries are what users reach for first, per language.
var optionalLibraries = []struct {
	lang, prog string
	libs       []library
	// advisory languages report missing libraries as ok, with the fix:
	// nothing of mcpbox's needs them.
	advisory bool
	// probe prints a JSON object {name: found} for the names in argv.
	probe string
}{
	{"python", "python3", []library{
		{"numpy", "python3-numpy"}, {"pandas", "python3-pandas"}, {"matplotlib", "python3-matplotlib"}, {"scipy", "python3-scipy"},
	}, false, `import importlib.util, json, sys
print(json.dumps({n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}))`},
	{"javascript", "node", []library{
		{"lodash", "node-lodash"}, {"d3", "node-d3"},
	}, true, `const found = {};
for (const n of process.argv.slice(1)) { try { require.resolve(n); found[n] = true } catch (e) { found[n] = false } }
console.log(JSON.stringify(found))`},
}

// libraryReport is what one language has of its optional libraries.
type libraryReport struct {
	Lang, Prog      string
	Advisory        bool
	Have, Missing   []string
	MissingPackages []string
	Err             error // the interpreter is missing or the probe failed
}

// probeLibraries asks lang's interpreter in the host template which of
// its optional libraries it can import, without importing them.
func probeLibraries(ctx context.Context, lang string) libraryReport {
	for _, l := range optionalLibraries {
		if l.lang != lang {
			continue
		}
		r := libraryReport{Lang: l.lang, Prog: l.prog, Advisory: l.advisory}
		path := templateProgram(l.prog)
		if path == "" {
			r.Err = fmt.Errorf("%s is not installed", l.prog)
			return r
		}
		args := []string{"-c", l.probe}
		if l.prog == "node" {
			args = []string{"-e", l.probe}
		}
		for _, lib := range l.libs {
			args = append(args, lib.name)
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Dir = "/" // a library in the caller's directory is not the sandbox's
		cmd.WaitDelay = time.Second
		b, err := cmd.Output()
		found := map[string]bool{}
		if err == nil {
			err = json.Unmarshal(b, &found)
		}
		if err != nil {
			r.Err = fmt.Errorf("%s could not be asked: %v", path, err)
			return r
		}
		for _, lib := range l.libs {
			if found[lib.name] {
				r.Have = append(r.Have, lib.name)
			} else {
				r.Missing = append(r.Missing, lib.name)
				r.MissingPackages = append(r.MissingPackages, lib.pkg)
			}
		}
		return r
	}
	return libraryReport{Lang: lang, Err: fmt.Errorf("no libraries known for %s", lang)}
}

// templateProgram finds prog where a sandbox's PATH does: /usr/local/bin
// before /usr/bin.
func templateProgram(prog string) string {
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, prog)
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	return ""
}

// finding turns a report into a doctor line: ok when every library is
// there, warn (with the apt-get line) otherwise.
func (r libraryReport) finding() finding {
	if r.Err != nil {
		return warn("apt-get install "+map[string]string{"python3": "python3", "node": "nodejs"}[r.Prog], "%v", r.Err)
	}
	have := strings.Join(r.Have, ", ")
	if have == "" {
		have = "none"
	}
	if len(r.Missing) == 0 {
		return ok("%s has %s", r.Prog, have)
	}
	fix := "apt-get install " + strings.Join(r.MissingPackages, " ")
	if r.Advisory {
		return ok("%s has %s; not installed: %s (optional: %s)", r.Prog, have, strings.Join(r.Missing, ", "), fix)
	}
	return warn(fix, "%s has %s; missing %s: code importing them fails in sandboxes of the host template, which cannot install them without network",
		r.Prog, have, strings.Join(r.Missing, ", "))
}

// libraryCheck is the doctor's line for lang's optional libraries.
func libraryCheck(lang string) func(context.Context, *Main) finding {
	return func(ctx context.Context, _ *Main) finding {
		return probeLibraries(ctx, lang).finding()
	}
}
