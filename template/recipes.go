package template

// Recipe is a built-in template: Debian packages on a minimal base.
type Recipe struct {
	// Packages are installed on top of the base system.
	Packages []string
	// Files are written into the root filesystem after the packages.
	Files map[string]string
}

// Recipes are the built-in templates `mcpbox template build NAME` makes.
// A recipe is never built by a sandbox create: that is refused with the
// command that builds it (a build downloads hundreds of megabytes and
// takes minutes, longer than any create call should wait).
var Recipes = map[string]Recipe{
	"python": {Packages: []string{"python3", "python3-pip", "python3-venv", "ca-certificates"}},
	"node":   {Packages: []string{"nodejs", "npm", "ca-certificates"}},
	"code-interpreter": {
		Packages: []string{"python3", "python3-pip", "python3-numpy", "python3-pandas", "python3-matplotlib",
			"fonts-dejavu-core", "fontconfig", "nodejs", "ca-certificates"},
		Files: map[string]string{
			// Agg needs no display, and a font cache made at build time
			// keeps the first plot from saying "building the font cache".
			"etc/matplotlibrc": "backend: Agg\n",
		},
	},
}
