package syncgo_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// alertRules is the shape of a Prometheus rule file.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// The alerting rules shipped in deploy/prometheus name only metrics the
// server exports (docs/observability.md, which TestMetricsDocumented
// checks against a scrape), with label names those metrics have and
// label values the document lists, a histogram only through its
// _bucket series, and every rule has a severity, a summary and a
// description. (promtool checks the PromQL itself; see the file's
// header.)
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("deploy/prometheus/syncgo-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f alertRules
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("the rule file does not parse: %v", err)
	}
	docs := documentedMetrics(t)
	doc, err := os.ReadFile("docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	metricRE := regexp.MustCompile(`\b(syncgo_[a-z_]+)(\{[^}]*\})?`)
	matcherRE := regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	groupingRE := regexp.MustCompile(`\b(?:by|ignoring|on|without)\s*\(([^)]*)\)`)
	alerts := 0
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			alerts++
			what := g.Name + "/" + r.Alert
			if r.Alert == "" || seen[r.Alert] {
				t.Errorf("%s: a rule without an alert name, or a name used twice", what)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", what, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", what)
			}
			if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for %q is not a positive duration", what, r.For)
			}
			// The labels a rule's expression may name: those of its
			// metrics, and the target's.
			allowed := []string{"instance", "job", "le"}
			uses := metricRE.FindAllStringSubmatch(r.Expr, -1)
			if len(uses) == 0 {
				t.Errorf("%s: names no syncgo metric", what)
			}
			for _, u := range uses {
				name := u[1]
				base, suffix := name, ""
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, s); ok && docs[b].typ == "histogram" {
						base, suffix = b, s
					}
				}
				m, ok := docs[base]
				if !ok {
					t.Errorf("%s: %s is not a metric the server exports", what, name)
					continue
				}
				if m.typ == "histogram" && suffix == "" {
					t.Errorf("%s: histogram %s named without _bucket, _sum or _count", what, name)
				}
				allowed = append(allowed, m.labels...)
				for _, mm := range matcherRE.FindAllStringSubmatch(u[2], -1) {
					label, value := mm[1], mm[3]
					if label != "le" && !slices.Contains(m.labels, label) {
						t.Errorf("%s: %s has no label %q (it has %v)", what, base, label, m.labels)
						continue
					}
					// Each value of an exact or alternated match is one
					// the document lists for the metric (in backquotes on
					// its row), or a status-code pattern.
					if label == "code" || label == "le" {
						continue
					}
					row := metricRow(string(doc), base)
					for _, v := range strings.Split(value, "|") {
						if !strings.Contains(row, "`"+v+"`") {
							t.Errorf("%s: %s{%s} matches %q, a value its documentation does not list", what, base, label, v)
						}
					}
				}
			}
			for _, gm := range groupingRE.FindAllStringSubmatch(r.Expr, -1) {
				for _, l := range strings.Split(gm[1], ",") {
					if l = strings.TrimSpace(l); l != "" && !slices.Contains(allowed, l) {
						t.Errorf("%s: groups or matches by %q, a label none of its metrics has", what, l)
					}
				}
			}
		}
	}
	if alerts < 10 {
		t.Errorf("only %d alerts", alerts)
	}
}

// metricRow returns the row of the metric's table in the document.
func metricRow(doc, name string) string {
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "| `"+name+"` |") {
			return line
		}
	}
	return ""
}
