package local_test

import (
	"context"
	"testing"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/internal/testutil"
	"github.com/mcpbox/mcpbox/runtime/local"
)

// BenchmarkTemplateCreate measures creating a sandbox until its agent
// answers /health from the host template and from an imported image (two
// layers, Python in them), side by side on one runtime, with and without
// the Python kernel starting as the sandbox boots.
func BenchmarkTemplateCreate(b *testing.B) {
	testutil.RequireRoot(b)
	home := testutil.Home(b)
	testutil.ImportPythonImage(b, home, "pyimg")
	rt, err := local.New(&local.Options{Home: home})
	if err != nil {
		b.Fatal(err)
	}
	fl, _ := mcpbox.LookupFlavor("small")
	for _, prestart := range []bool{false, true} {
		for _, tmpl := range []string{"default", "pyimg"} {
			name := "template=" + tmpl
			if prestart {
				name += "/prestart=python"
			}
			b.Run(name, func(b *testing.B) {
				spec := mcpbox.SandboxSpec{Flavor: fl, Template: tmpl}
				if prestart {
					spec.Prestart = []mcpbox.Language{mcpbox.Python}
				}
				var t testutil.Timings
				for b.Loop() {
					spec.ID = testutil.ID()
					t.Time(func() {
						if _, err := rt.Create(context.Background(), spec); err != nil {
							b.Fatal(err)
						}
					})
					b.StopTimer()
					if err := rt.Destroy(context.Background(), spec.ID); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				t.Report(b)
			})
		}
	}
}
