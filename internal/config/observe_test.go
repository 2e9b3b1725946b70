package config

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/syncgo/syncgo/auth"
)

// The observability and browser-facing settings load from the file with
// the environment over it, and default to text logs at info with an
// access log, metrics on, no admin listener and no CORS.
func TestObserveSettings(t *testing.T) {
	d := Default()
	if d.Log != (Log{Format: LogText, Level: "info", Access: true}) || !d.Metrics.Enabled || d.Admin.Listen != "" ||
		d.CORS.AllowedOrigins != nil || d.CORS.MaxAge != 10*time.Minute {
		t.Fatalf("defaults %+v %+v %+v %+v", d.Log, d.Metrics, d.Admin, d.CORS)
	}
	path := writeFile(t, `
log: {format: json, level: debug, access: false}
metrics: {enabled: false}
admin: {listen: "127.0.0.1:9090"}
cors:
  allowed_origins: [https://app.example.com]
  allowed_headers: [Authorization]
  max_age: 1m
  allow_credentials: true
`)
	c, err := Load(path, env(map[string]string{
		"SYNCGO_LOG_LEVEL":            "warn",
		"SYNCGO_CORS_ALLOWED_ORIGINS": "https://a.example.com, https://*.b.example.com",
		"SYNCGO_CORS_EXPOSED_HEADERS": "ETag",
		"SYNCGO_METRICS_ENABLED":      "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := CORS{AllowedOrigins: []string{"https://a.example.com", "https://*.b.example.com"}, AllowedHeaders: []string{"Authorization"},
		ExposedHeaders: []string{"ETag"}, MaxAge: time.Minute, AllowCredentials: true}
	if c.Log != (Log{Format: LogJSON, Level: "warn", Access: false}) || !c.Metrics.Enabled || c.Admin.Listen != "127.0.0.1:9090" ||
		!reflect.DeepEqual(c.CORS, want) {
		t.Fatalf("loaded %+v %+v %+v %+v", c.Log, c.Metrics, c.Admin, c.CORS)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Log.SlogLevel(); l != slog.LevelWarn {
		t.Errorf("level %v", l)
	}
}

// Settings a browser would refuse, or malformed ones, fail Validate
// naming the setting.
func TestObserveSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Log.Format = "xml" }, "log.format"},
		{func(c *Config) { c.Log.Level = "loud" }, "log.level"},
		{func(c *Config) { c.CORS.AllowedOrigins = []string{"*"}; c.CORS.AllowCredentials = true }, "allow_credentials"},
		{func(c *Config) {
			c.CORS.AllowedOrigins = []string{"*"}
			c.Auth.TokenSources = []auth.TokenSource{{Header: "Authorization"}, {Cookie: "session"}}
		}, `cookie token source "session"`},
		{func(c *Config) { c.CORS.AllowedOrigins = []string{"app.example.com"} }, "cors.allowed_origins"},
		{func(c *Config) { c.CORS.AllowedOrigins = []string{"https://*.*.example.com"} }, "cors.allowed_origins"},
	} {
		c := Default()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error naming %s", err, tc.want)
		}
	}
}
