package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/syncgo/syncgo/internal/binarytest"
	"github.com/syncgo/syncgo/internal/s3test"
)

// serve with blobs.store s3://bucket/prefix keeps uploaded blobs in the
// object store (internal/s3test: a real one under CI), its secret from the
// environment; config check describes it without the secret; a bucket
// that does not exist stops serve at start.
func TestBinaryS3Blobs(t *testing.T) {
	bin := binarytest.Build(t)
	s3 := s3test.Start(t, "syncgo-blobs")
	dir := t.TempDir()
	config := func(name, bucket string) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, []byte(`listen: 127.0.0.1:0
db: `+filepath.Join(dir, name+".db")+`
blobs:
  store: s3://`+bucket+`/deploy-1/
  s3:
    endpoint: `+s3.URL+`
    region: us-east-1
    access_key_id: `+s3.AccessKey+`
    path_style: true
    presign_ttl: 5m
`), 0o600))
		return p
	}
	secret := s3.SecretKey
	env := []string{"SYNCGO_BLOBS_S3_SECRET_ACCESS_KEY=" + secret}
	p := binarytest.Serve(t, bin, binarytest.Options{Dir: dir, Env: env}, "-config", config("ok.yaml", s3.Bucket))

	data := bytes.Repeat([]byte("binary s3 blob "), 1000)
	sum := sha256.Sum256(data)
	id := "sha256:" + hex.EncodeToString(sum[:])
	req, _ := http.NewRequest(http.MethodPut, p.URL+"/blobs/"+id, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT /blobs: %d %s", resp.StatusCode, body)
	}
	ctx := context.Background()
	c := s3.Client(t)
	var list []minio.ObjectInfo
	for o := range c.ListObjects(ctx, s3.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		must(t, o.Err)
		list = append(list, o)
	}
	if len(list) != 1 || !strings.HasPrefix(list[0].Key, "deploy-1/b/") ||
		!strings.HasSuffix(list[0].Key, hex.EncodeToString(sum[:])) || list[0].Size != int64(len(data)) {
		t.Fatalf("the bucket holds %+v; want the blob under deploy-1/b/", list)
	}
	obj, err := c.GetObject(ctx, s3.Bucket, list[0].Key, minio.GetObjectOptions{})
	must(t, err)
	got, err := io.ReadAll(obj)
	obj.Close()
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatal("the object store holds other bytes")
	}

	out, errOut, code := binarytest.Run(t, bin, env, "config", "check", config("check.yaml", s3.Bucket))
	if code != 0 || !strings.Contains(out, `S3 bucket "`+s3.Bucket+`", prefix "deploy-1/"`) || !strings.Contains(out, s3.AccessKey) ||
		strings.Contains(out+errOut+p.Stderr.String()+p.Stdout.String(), secret) {
		t.Fatalf("config check: exit %d\n%s\n%s", code, out, errOut)
	}
	bad := filepath.Join(dir, "bad.yaml")
	must(t, os.WriteFile(bad, []byte("blobs:\n  store: s3://Bad_Bucket/x\n  s3: {endpoint: "+s3.URL+"}\n"), 0o600))
	if _, errOut, code := binarytest.Run(t, bin, nil, "config", "check", bad); code == 0 || !strings.Contains(errOut, "bucket name") {
		t.Fatalf("config check of a bad bucket name: exit %d: %s", code, errOut)
	}

	_, err = binarytest.Start(t, bin, binarytest.Options{Dir: dir, Env: env, Name: "serve (missing bucket)"}, "-config", config("missing.yaml", "no-such-bucket"))
	var ee *binarytest.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.Stderr, "no-such-bucket") || strings.Contains(ee.Stderr, secret) {
		t.Fatalf("serve with a missing bucket: %v", err)
	}
}
