package template

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// bigImage is about mb MB of incompressible files in four layers.
func bigImage(b *testing.B, mb int) v1.Image {
	var layers []v1.Layer
	for i := range 4 {
		data := make([]byte, mb<<20/4)
		rand.Read(data)
		layers = append(layers, layerOf(b, entry{hdr: tar.Header{Name: fmt.Sprintf("data/%d.bin", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}, body: string(data)}))
	}
	return imageOf(b, nil, layers...)
}

// BenchmarkPull pulls a 100 MB image from a registry on loopback into an
// empty store (download, gunzip, verify, unpack), beside a plain cp of
// the same compressed blobs from one directory to another.
func BenchmarkPull(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: layers are owned by mapped uids")
	}
	const mb = 100
	img := bigImage(b, mb)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref, _ := name.ParseReference(u.Host+"/bench/big:1", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		b.Fatal(err)
	}
	layers, _ := img.Layers()
	var compressed int64
	for _, l := range layers {
		n, _ := l.Size()
		compressed += n
	}

	b.Run("baseline=cp-blobs", func(b *testing.B) {
		src := b.TempDir()
		for i, l := range layers {
			rc, _ := l.Compressed()
			f, _ := os.Create(filepath.Join(src, fmt.Sprint(i)))
			io.Copy(f, rc)
			f.Close()
			rc.Close()
		}
		b.SetBytes(compressed)
		for b.Loop() {
			dst := b.TempDir()
			for i := range layers {
				in, _ := os.Open(filepath.Join(src, fmt.Sprint(i)))
				out, _ := os.Create(filepath.Join(dst, fmt.Sprint(i)))
				if _, err := io.Copy(out, in); err != nil {
					b.Fatal(err)
				}
				out.Sync()
				out.Close()
				in.Close()
			}
		}
	})
	b.Run("baseline=skopeo-copy", func(b *testing.B) {
		if _, err := exec.LookPath("skopeo"); err != nil {
			b.Skip("skopeo is not installed (apt-get install skopeo); cp-blobs is the baseline then")
		}
		b.SetBytes(compressed)
		for b.Loop() {
			dst := b.TempDir()
			out, err := exec.Command("skopeo", "copy", "--src-tls-verify=false", "docker://"+ref.String(), "dir:"+dst).CombinedOutput()
			if err != nil {
				b.Fatalf("skopeo: %v: %s", err, out)
			}
			syncDir(dst)
		}
	})
	b.Run("pull", func(b *testing.B) {
		b.SetBytes(compressed)
		for b.Loop() {
			b.StopTimer()
			s := testStore(b, nil)
			b.StartTimer()
			if _, err := s.Pull(context.Background(), "big", ref.String(), &PullOptions{Insecure: true}, nil); err != nil {
				b.Fatal(err)
			}
			syncDir(s.LayersDir())
		}
	})
}

// syncDir flushes what was written, as cp's Sync does for its side.
func syncDir(dir string) {
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if f, err := os.Open(p); err == nil {
				f.Sync()
				f.Close()
			}
		}
		return nil
	})
}
