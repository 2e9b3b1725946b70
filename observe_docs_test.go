package syncgo_test

import (
	"bufio"
	"context"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/syncgo/syncgo"
	"github.com/syncgo/syncgo/internal/sspclient"
	"github.com/syncgo/syncgo/reaction"
)

// metricFamily is a metric's type and label names.
type metricFamily struct {
	typ    string
	labels []string
}

// families reads the syncgo_ families of a scrape: type and label names
// (a histogram's le excluded).
func (s scraped) families() map[string]metricFamily {
	out := map[string]metricFamily{}
	sc := bufio.NewScanner(strings.NewReader(string(s)))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			if strings.HasPrefix(name, "syncgo_") {
				out[name] = metricFamily{typ: typ}
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, _, _ := strings.Cut(line, " ")
		name, labels, _ := strings.Cut(series, "{")
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if f, ok := out[base]; ok && f.typ == "histogram" {
					name = base
				}
			}
		}
		f, ok := out[name]
		if !ok {
			continue
		}
		for _, kv := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			k, _, _ := strings.Cut(kv, "=")
			if k != "" && k != "le" && !slices.Contains(f.labels, k) {
				f.labels = append(f.labels, k)
			}
		}
		sort.Strings(f.labels)
		out[name] = f
	}
	return out
}

// documentedMetrics reads the metric tables of docs/observability.md:
// name, type and the label names of each row.
func documentedMetrics(t *testing.T) map[string]metricFamily {
	t.Helper()
	b, err := os.ReadFile("docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(syncgo_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")
	paren := regexp.MustCompile(`\([^)]*\)`)
	label := regexp.MustCompile("^`([a-z_]+)`")
	out := map[string]metricFamily{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		f := metricFamily{typ: m[2]}
		for _, part := range strings.Split(paren.ReplaceAllString(m[3], ""), ",") {
			if l := label.FindStringSubmatch(strings.TrimSpace(part)); l != nil {
				f.labels = append(f.labels, l[1])
			}
		}
		sort.Strings(f.labels)
		out[m[1]] = f
	}
	return out
}

// docs/observability.md lists every metric a server exports, with its
// type and label names, and no metric that does not exist: compared with
// a scrape of a server with reactions, after a push and a pull. A
// documented metric may be absent only for the reason the document gives
// (no series while ready; the pool and the commit listeners on a shared
// store only).
func TestMetricsDocumented(t *testing.T) {
	forEachDriver(t, func(t *testing.T, d e2eDriver) {
		e := newMetricsEnv(t, d, func(c *syncgo.Config) {
			c.Reactions = &syncgo.ReactionConfig{Planner: taskPlanner("mail"),
				Handlers: map[string]reaction.Handler{"mail": func(context.Context, *reaction.Delivery) error { return nil }}}
		})
		c := e.client("alice", sspclient.Options{})
		mustSubscribe(t, c, "s", "p1")
		mustUpsert(t, c, taskRow("t1", "p1", "x"))
		syncQuiet(t, c)
		got := e.scrape().families()
		docs := documentedMetrics(t)
		for name, f := range got {
			df, ok := docs[name]
			if !ok {
				t.Errorf("%s (%s %v) is not documented", name, f.typ, f.labels)
				continue
			}
			if df.typ != f.typ || !slices.Equal(df.labels, f.labels) {
				t.Errorf("%s: scraped %s %v, documented %s %v", name, f.typ, f.labels, df.typ, df.labels)
			}
		}
		for name := range docs {
			if _, ok := got[name]; ok {
				continue
			}
			conditional := name == "syncgo_readiness_phase" ||
				(d.name == "sqlite" && (strings.HasPrefix(name, "syncgo_db_pool_") || strings.HasPrefix(name, "syncgo_commit_listener_")))
			if !conditional {
				t.Errorf("%s is documented but the server does not export it", name)
			}
		}
		if len(got) < 35 {
			t.Fatalf("only %d syncgo_ families scraped", len(got))
		}
	})
}
