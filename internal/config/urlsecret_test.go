package config

import (
	"strings"
	"testing"
)

// A URL setting refused for its shape is named in the error without the
// password its user info carries (an S3 key pasted into the endpoint, a
// collector's credentials): config check and serve print these errors,
// and their output ends up in CI and deployment logs.
func TestRefusedURLHidesItsPassword(t *testing.T) {
	const secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) {
			c.Blobs.Store, c.Blobs.S3.Endpoint = "s3://bucket", "https://AKIAEXAMPLE:"+secret+"@s3.example.com"
		}, "blobs.s3.endpoint"},
		{func(c *Config) {
			c.Blobs.Store, c.Blobs.S3.Endpoint = "s3://bucket", "AKIAEXAMPLE:"+secret+"@s3.example.com"
		}, "blobs.s3.endpoint"},
		{func(c *Config) { c.SignedURLs.PublicURL = "https://u:" + secret + "@sync.example.com/api?x=1" }, "signed_urls.public_url"},
		{func(c *Config) { c.Tracing.Endpoint = "grpc://u:" + secret + "@collector:4317" }, "tracing.endpoint"},
	} {
		c := Default()
		c.DB = "x.db"
		tc.set(&c)
		err := c.Validate()
		if err == nil {
			_, err = c.Blobs.S3Location()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error naming it", tc.want, err)
			continue
		}
		if !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("%s: the error does not show where the password was: %v", tc.want, err)
		}
		for _, part := range []string{secret, "wJalrXUtnFEMI", "bPxRfiCY"} {
			if strings.Contains(err.Error(), part) {
				t.Errorf("%s: the error shows the password: %v", tc.want, err)
				break
			}
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://AKIA:se/cr+et@s3.example.com":  "https://AKIA:xxxxx@s3.example.com",
		"AKIA:secret@s3.example.com":            "AKIA:xxxxx@s3.example.com",
		"https://u:p@ss@host/x":                 "https://u:xxxxx@host/x",
		"https://user@host:9000":                "https://user@host:9000",
		"http://localhost:9000":                 "http://localhost:9000",
		"s3.example.com:9000":                   "s3.example.com:9000",
		"https://sync.example.com/api?st=a:b@c": "https://sync.example.com/api?st=a:b@c",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
