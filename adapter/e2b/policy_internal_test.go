package e2b

import (
	"reflect"
	"testing"

	"github.com/mcpbox/mcpbox"
)

func TestPolicy(t *testing.T) {
	yes, no := true, false
	for name, c := range map[string]struct {
		allow *bool
		net   *networkBody
		want  *mcpbox.NetworkPolicy
	}{
		"nothing said: the server's default": {nil, nil, nil},
		"internet":                           {&yes, nil, &mcpbox.NetworkPolicy{Public: true}},
		"no internet":                        {&no, nil, &mcpbox.NetworkPolicy{}},
		"allow-list":                         {nil, &networkBody{AllowOut: []string{"pypi.org"}}, &mcpbox.NetworkPolicy{Allow: []string{"pypi.org"}}},
		"deny all but":                       {nil, &networkBody{AllowOut: []string{"pypi.org"}, DenyOut: []string{allTraffic}}, &mcpbox.NetworkPolicy{Allow: []string{"pypi.org"}}},
		"all but":                            {nil, &networkBody{AllowOut: []string{allTraffic}, DenyOut: []string{"evil.example"}}, &mcpbox.NetworkPolicy{Public: true, Deny: []string{"evil.example"}}},
		"empty network":                      {nil, &networkBody{}, nil},
	} {
		if got := policy(c.allow, c.net); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", name, got, c.want)
		}
	}
}
