package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestS3Location(t *testing.T) {
	ok := func(store, endpoint string) Blobs {
		return Blobs{Store: store, S3: BlobS3{Endpoint: endpoint, AccessKeyID: "id", SecretAccessKey: "s"}}
	}
	for _, c := range []struct {
		b    Blobs
		want BlobS3Location
	}{
		{ok("s3://my-bucket", "s3.example.com"), BlobS3Location{Bucket: "my-bucket", Endpoint: "s3.example.com"}},
		{ok("s3://my-bucket/a/b/", "http://127.0.0.1:9000"), BlobS3Location{Bucket: "my-bucket", Prefix: "a/b/", Endpoint: "127.0.0.1:9000", Insecure: true}},
		{ok("s3://b.c.d//x", "https://minio.internal/"), BlobS3Location{Bucket: "b.c.d", Prefix: "x/", Endpoint: "minio.internal"}},
		{Blobs{Store: "s3://anon", S3: BlobS3{Endpoint: "h"}}, BlobS3Location{Bucket: "anon", Endpoint: "h"}},
	} {
		got, err := c.b.S3Location()
		if err != nil || got != c.want {
			t.Errorf("%s at %s: %+v, %v; want %+v", c.b.Store, c.b.S3.Endpoint, got, err, c.want)
		}
	}
	for _, c := range []struct {
		b    Blobs
		want string
	}{
		{ok("s3://", "h"), "bucket name"},
		{ok("s3://Upper", "h"), "bucket name"},
		{ok("s3://ab", "h"), "bucket name"},
		{ok("s3://-abc", "h"), "bucket name"},
		{ok("s3://abc", ""), "endpoint is required"},
		{ok("s3://abc", "ftp://h"), "endpoint"},
		{ok("s3://abc", "https://user:pw@h"), "endpoint"},
		{ok("s3://abc", "https://h/path"), "endpoint"},
		{ok("s3://abc", "h/path"), "endpoint"},
		{Blobs{Store: "s3://abc", S3: BlobS3{Endpoint: "h", AccessKeyID: "id"}}, "go together"},
		{Blobs{Store: "s3://abc", S3: BlobS3{Endpoint: "h", SecretAccessKey: "s"}}, "go together"},
		{Blobs{Store: "s3://abc", S3: BlobS3{Endpoint: "h", AccessKeyID: "id", SecretAccessKey: "s", SecretAccessKeyFile: "f"}}, "not both"},
		{Blobs{Store: "s3://abc", S3: BlobS3{Endpoint: "h", PresignTTL: time.Hour}}, "presign_ttl"},
	} {
		if _, err := c.b.S3Location(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error about %q", c.b, err, c.want)
		}
	}
}

// The secret comes from the environment or a file (relative to the
// config file), never needs the file's text.
func TestS3SecretSources(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "s3.key"), []byte("from-file\n"), 0o600))
	cfg := filepath.Join(dir, "c.yaml")
	must(os.WriteFile(cfg, []byte("blobs:\n  store: s3://bkt/p\n  s3:\n    endpoint: h\n    access_key_id: id\n    secret_access_key_file: s3.key\n"), 0o600))
	c, err := Load(cfg, func(string) string { return "" })
	must(err)
	if s, err := c.Blobs.S3Secret(); err != nil || s != "from-file" {
		t.Fatalf("secret from a relative file: %q, %v", s, err)
	}
	env := map[string]string{"SYNCGO_BLOBS_STORE": "s3://bkt", "SYNCGO_BLOBS_S3_ENDPOINT": "http://127.0.0.1:1",
		"SYNCGO_BLOBS_S3_ACCESS_KEY_ID": "id", "SYNCGO_BLOBS_S3_SECRET_ACCESS_KEY": "from-env", "SYNCGO_BLOBS_S3_PATH_STYLE": "true",
		"SYNCGO_BLOBS_S3_PRESIGN_TTL": "2m"}
	c, err = Load("", func(k string) string { return env[k] })
	must(err)
	if _, err := c.Blobs.S3Location(); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Blobs.S3Secret(); err != nil || s != "from-env" || !c.Blobs.S3.PathStyle || c.Blobs.S3.PresignTTL != 2*time.Minute {
		t.Fatalf("from the environment: %+v, secret %q, %v", c.Blobs.S3, s, err)
	}
	c.Blobs.S3 = BlobS3{SecretAccessKeyFile: filepath.Join(dir, "missing")}
	if _, err := c.Blobs.S3Secret(); err == nil {
		t.Fatal("a missing secret file was accepted")
	}
}

// Whatever blobs.store and endpoint say, S3Location does not panic, and
// what it accepts is a valid bucket, a prefix that is empty or ends in
// one slash, and a bare host.
func FuzzS3Location(f *testing.F) {
	f.Add("s3://bucket/p", "https://h:9000")
	f.Add("s3://a.b-c//x//", "http://127.0.0.1")
	f.Add("s3://", "")
	f.Fuzz(func(t *testing.T, store, endpoint string) {
		loc, err := Blobs{Store: store, S3: BlobS3{Endpoint: endpoint}}.S3Location()
		if err != nil {
			return
		}
		if !validBucket(loc.Bucket) || (loc.Prefix != "" && (!strings.HasSuffix(loc.Prefix, "/") || strings.HasPrefix(loc.Prefix, "/"))) ||
			loc.Endpoint == "" || strings.ContainsAny(loc.Endpoint, "/?@") {
			t.Fatalf("%q at %q accepted as %+v", store, endpoint, loc)
		}
	})
}
