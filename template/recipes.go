package template

// Recipe is a built-in template: Debian packages on a minimal system.
type Recipe struct {
	// Packages are installed on top of the minimal system.
	Packages []string
	// Files are written into the root filesystem after the packages.
	Files map[string]string
	// Hooks are mmdebstrap hook options run last ("$1" is the root).
	Hooks []string
	// Env is the template's environment, over PATH and LANG.
	Env map[string]string
}

// Recipes are the built-in templates `mcpbox template build NAME` makes.
// A sandbox create never builds one: asking for a recipe not built yet
// is refused with the command that builds it. A build downloads hundreds
// of megabytes and takes minutes, longer than any create call (or MCP
// client) should wait, and a build started by a request would run with
// that caller's cancellation.
var Recipes = map[string]Recipe{
	"python": {Packages: []string{"python3", "python3-pip", "python3-venv", "ca-certificates"}},
	"node":   {Packages: []string{"nodejs", "npm", "ca-certificates"}},
	"code-interpreter": {
		Packages: []string{"python3", "python3-pip", "python3-numpy", "python3-pandas", "python3-matplotlib",
			"fonts-dejavu-core", "fontconfig", "nodejs", "ca-certificates",
			// matplotlib's fonttools needs "python3-scipy | python3-munkres";
			// apt takes the first, and scipy's pythran brings gcc, g++ and
			// Boost: some 900 MB the template has no use for.
			"python3-munkres"},
		Files: map[string]string{"etc/matplotlibrc": "backend: Agg\n"},
		// The font caches are made now, so a first plot says nothing on
		// stderr ("Matplotlib is building the font cache"); the
		// directory stays writable, or matplotlib warns it is not.
		Hooks: []string{
			`--customize-hook=chroot "$1" fc-cache -f`,
			`--customize-hook=mkdir -p "$1/var/cache/matplotlib" && chroot "$1" env MPLCONFIGDIR=/var/cache/matplotlib python3 -c "import matplotlib.pyplot as p; p.figure()" && chmod -R a+rwX "$1/var/cache/matplotlib" && chmod 1777 "$1/var/cache/matplotlib"`,
		},
		Env: map[string]string{"MPLCONFIGDIR": "/var/cache/matplotlib", "MPLBACKEND": "Agg"},
	},
}
