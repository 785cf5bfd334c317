package filesystem

import (
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/sys/unix"
)

// File metadata, as envd keeps it since 0.6.2: each X-Metadata-<key>
// header of an upload becomes the extended attribute user.e2b.<key> of
// the file (key lowercased: HTTP header names have no case), and
// EntryInfo.metadata reads them back.
const (
	metadataHeader = "X-Metadata-"
	metadataXattr  = "user.e2b."
	// Bounds on what one file may carry: the kernel caps a tmpfs value
	// at a page and a name at 255 bytes anyway.
	maxMetadataKeys  = 64
	maxMetadataValue = 4096
)

// uploadMetadata returns the metadata an upload's headers carry.
func uploadMetadata(h http.Header) (map[string]string, error) {
	md := map[string]string{}
	for k, v := range h {
		key, ok := strings.CutPrefix(http.CanonicalHeaderKey(k), metadataHeader)
		if !ok || len(v) == 0 {
			continue
		}
		key = strings.ToLower(key)
		if key == "" || len(metadataXattr)+len(key) > 255 {
			return nil, fmt.Errorf("metadata key %q: use 1 to %d characters", key, 255-len(metadataXattr))
		}
		if len(v[0]) > maxMetadataValue {
			return nil, fmt.Errorf("metadata %q: the value is longer than %d bytes", key, maxMetadataValue)
		}
		md[key] = v[0]
	}
	if len(md) > maxMetadataKeys {
		return nil, fmt.Errorf("%d metadata keys: at most %d", len(md), maxMetadataKeys)
	}
	return md, nil
}

// setMetadata stores md on the file at p.
func setMetadata(p string, md map[string]string) error {
	for k, v := range md {
		if err := unix.Lsetxattr(p, metadataXattr+k, []byte(v), 0); err != nil {
			return fmt.Errorf("store metadata %q as an extended attribute: %w", k, err)
		}
	}
	return nil
}

// readMetadata returns the user.e2b.* attributes of p; nil when it has
// none or its filesystem keeps none.
func readMetadata(p string) map[string]string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return nil
	}
	var md map[string]string
	val := make([]byte, maxMetadataValue)
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, metadataXattr)
		if !ok || key == "" {
			continue
		}
		m, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = string(val[:m])
	}
	return md
}
