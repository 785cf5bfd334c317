package local_test

import "connectrpc.com/connect"

// codecOption returns the client options for a codec name: "json" is what
// E2B's SDKs speak, "proto" the binary default.
func codecOption(name string) []connect.ClientOption {
	if name == "json" {
		return []connect.ClientOption{connect.WithProtoJSON()}
	}
	return nil
}
