package engines

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// WriteOCIArchive writes at out an OCI image layout as a tar archive (what
// `ctr images import` takes): one uncompressed layer, the root filesystem
// tarball rootfs as it is, and an image config whose command is cmd. The
// index names the image ref for containerd (io.containerd.image.name) and
// by its tag (org.opencontainers.image.ref.name). No registry is involved.
func WriteOCIArchive(out, rootfs, ref string, cmd []string) error {
	layerDigest, layerSize, err := fileDigest(rootfs)
	if err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Cmd": cmd,
			"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.layer.v1.tar",
			"digest":    layerDigest,
			"size":      layerSize,
		}},
	})
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	mdesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	mdesc["annotations"] = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tag,
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []any{mdesc},
	})
	if err != nil {
		return err
	}
	return writeLayout(out, rootfs, layerDigest, layerSize, map[string][]byte{
		"oci-layout":                 []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":                 index,
		blobPath(digestOf(config)):   config,
		blobPath(digestOf(manifest)): manifest,
	})
}

// writeLayout writes the small files and then the layer blob, streamed
// from rootfs.
func writeLayout(out, rootfs, layerDigest string, layerSize int64, files map[string][]byte) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	for name, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(layerDigest), Mode: 0o644, Size: layerSize}); err != nil {
		return err
	}
	layer, err := os.Open(rootfs)
	if err != nil {
		return err
	}
	defer layer.Close()
	if n, err := io.Copy(tw, layer); err != nil || n != layerSize {
		return fmt.Errorf("copy layer %s: %d of %d bytes: %v", rootfs, n, layerSize, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(b), "size": len(b)}
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

func fileDigest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}
