package cli_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncgo/syncgo/internal/binarytest"
)

// The deployment files of deploy/ stay true: the syncgo configs pass
// `syncgo config check` with the environment their manifests give them,
// and the Kubernetes probes, ports and grace period agree with the
// config.
func TestDeployManifests(t *testing.T) {
	bin := binarytest.Build(t)
	dir := t.TempDir()
	password := filepath.Join(dir, "db-password")
	must(t, os.WriteFile(password, []byte("not-a-real-password"), 0o600))
	const jwtSecret = "0123456789abcdef0123456789abcdef-test"
	check := func(t *testing.T, config string, env []string) {
		t.Helper()
		out, errOut, code := binarytest.Run(t, bin, env, "config", "check", config)
		if code != 0 || !strings.Contains(out, ": OK") {
			t.Fatalf("config check %s: exit %d\n%s%s", config, code, out, errOut)
		}
	}

	t.Run("compose", func(t *testing.T) {
		var compose struct {
			Services map[string]struct {
				Environment map[string]string `yaml:"environment"`
				Volumes     []string          `yaml:"volumes"`
			} `yaml:"services"`
		}
		decodeYAML(t, "../../deploy/compose.yaml", &compose)
		svc, ok := compose.Services["syncgo-a"]
		if !ok {
			t.Fatal("compose.yaml has no service syncgo-a")
		}
		if !slices.Contains(svc.Volumes, "./syncgo.yaml:/etc/syncgo/syncgo.yaml:ro") {
			t.Fatalf("syncgo-a does not mount deploy/syncgo.yaml: %v", svc.Volumes)
		}
		var env []string
		for k, v := range svc.Environment {
			switch {
			case k == "SYNCGO_DB_PASSWORD_FILE":
				v = password
			case strings.HasPrefix(v, "${"):
				v = jwtSecret
			}
			env = append(env, k+"="+v)
		}
		check(t, "../../deploy/syncgo.yaml", env)
	})

	t.Run("kubernetes", func(t *testing.T) {
		docs := decodeYAMLDocs(t, "../../deploy/kubernetes.yaml")
		byKind := map[string]map[string]any{}
		for _, d := range docs {
			byKind[str(d, "kind")] = d
		}
		cm, dep, svc := byKind["ConfigMap"], byKind["Deployment"], byKind["Service"]
		if cm == nil || dep == nil || svc == nil || byKind["PodDisruptionBudget"] == nil {
			t.Fatalf("kinds %v", slices.Collect(func(yield func(string) bool) {
				for k := range byKind {
					if !yield(k) {
						return
					}
				}
			}))
		}
		cfgDir := filepath.Join(dir, "etc-syncgo")
		must(t, os.MkdirAll(cfgDir, 0o700))
		data := get(cm, "data").(map[string]any)
		for name, v := range data {
			must(t, os.WriteFile(filepath.Join(cfgDir, name), []byte(v.(string)), 0o600))
		}
		var cfg struct {
			Listen        string `yaml:"listen"`
			ShutdownDelay string `yaml:"shutdown_delay"`
			Admin         struct {
				Listen string `yaml:"listen"`
			} `yaml:"admin"`
		}
		must(t, yaml.Unmarshal([]byte(data["syncgo.yaml"].(string)), &cfg))

		pod := get(dep, "spec", "template", "spec").(map[string]any)
		c := get(pod, "containers").([]any)[0].(map[string]any)
		var env []string
		for _, e := range get(c, "env").([]any) {
			e := e.(map[string]any)
			name := str(e, "name")
			v, ok := e["value"].(string)
			switch {
			case name == "SYNCGO_DB_PASSWORD_FILE":
				if !strings.HasPrefix(v, "/run/secrets/syncgo/") || !hasMount(c, "/run/secrets/syncgo") {
					t.Errorf("the password file %s is not on the secret volume", v)
				}
				v = password
			case !ok:
				if get(e, "valueFrom", "secretKeyRef", "key") != "jwt-secret" {
					t.Errorf("env %s: %v", name, e)
				}
				v = jwtSecret
			}
			env = append(env, name+"="+v)
		}
		check(t, filepath.Join(cfgDir, "syncgo.yaml"), env)

		args := get(c, "args").([]any)
		if len(args) != 3 || args[0] != "serve" || args[1] != "-config" || args[2] != "/etc/syncgo/syncgo.yaml" || !hasMount(c, "/etc/syncgo") {
			t.Errorf("the container does not serve the ConfigMap's config: args %v", args)
		}
		ports := map[string]int{}
		for _, p := range get(c, "ports").([]any) {
			p := p.(map[string]any)
			ports[str(p, "name")] = get(p, "containerPort").(int)
		}
		if ports["http"] != portOf(t, cfg.Listen) || ports["admin"] != portOf(t, cfg.Admin.Listen) {
			t.Errorf("container ports %v; the config listens on %s and %s", ports, cfg.Listen, cfg.Admin.Listen)
		}
		for probe, path := range map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
			if get(c, probe, "httpGet", "path") != path || get(c, probe, "httpGet", "port") != "http" {
				t.Errorf("%s: %v; want %s on the http port", probe, get(c, probe), path)
			}
		}
		delay, err := time.ParseDuration(cfg.ShutdownDelay)
		must(t, err)
		if grace := time.Duration(get(pod, "terminationGracePeriodSeconds").(int)) * time.Second; grace < delay+10*time.Second {
			t.Errorf("terminationGracePeriodSeconds %v leaves too little after shutdown_delay %v", grace, delay)
		}
		if get(c, "securityContext", "readOnlyRootFilesystem") == true && !hasMount(c, "/tmp") {
			t.Error("a read-only root file system without a writable /tmp: SQLite-image bootstraps need one")
		}
		labels := get(dep, "spec", "template", "metadata", "labels").(map[string]any)
		for k, v := range get(svc, "spec", "selector").(map[string]any) {
			if labels[k] != v {
				t.Errorf("the Service selects %s=%v; the pods are labelled %v", k, v, labels)
			}
		}
		if get(svc, "spec", "ports").([]any)[0].(map[string]any)["targetPort"] != "http" {
			t.Error("the Service does not target the http port")
		}
	})
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	must(t, yaml.Unmarshal(b, v))
}

func decodeYAMLDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		must(t, err)
		docs = append(docs, d)
	}
}

// get walks nested maps by keys; nil when a key is missing.
func get(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

func hasMount(c map[string]any, path string) bool {
	for _, m := range get(c, "volumeMounts").([]any) {
		if str(m.(map[string]any), "mountPath") == path {
			return true
		}
	}
	return false
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	must(t, err)
	n, err := strconv.Atoi(p)
	must(t, err)
	return n
}
