package syncgo

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncgo/syncgo/internal/memfree"
	"github.com/syncgo/syncgo/store"
)

// scrapeReadyTimeout bounds the readiness check a scrape runs.
const scrapeReadyTimeout = 2 * time.Second

// serverCollector reads the counters the server keeps anyway (realtime
// hub, store, connection pool, caches, admission) and the readiness state
// when scraped: nothing of it costs the request path.
type serverCollector struct {
	s *Server

	socketsOpen, deltas, wakes, drops, closes, gaps, narrowed   *prometheus.Desc
	memoryReleases, memoryReleaseSeconds, listenerConnects      *prometheus.Desc
	listenerUp                                                  *prometheus.Desc
	storeWrites, storeWriteErrors, storeBatches, storeCommits   *prometheus.Desc
	storeRecentWindows, storeSharedReads, storeConnRetries      *prometheus.Desc
	poolConns, poolMax, poolAcquires, poolAcquireSeconds        *prometheus.Desc
	poolWaits, poolWaitSeconds, poolCanceled, poolNewConns      *prometheus.Desc
	pageCache, images, readAhead, catchUpResets                 *prometheus.Desc
	admCapacity, admInFlight, admQueued, admRefused, bodyMemory *prometheus.Desc
	socketsRefused, compressed, pushResultsPruned               *prometheus.Desc
	ready, readyPhase, pending, schemaVersion                   *prometheus.Desc
}

func newServerCollector(s *Server) *serverCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &serverCollector{s: s,
		socketsOpen: d("syncgo_realtime_sockets_open", "Realtime sockets connected now."),
		deltas:      d("syncgo_realtime_deltas_total", "Delta messages queued to realtime sockets."),
		wakes:       d("syncgo_realtime_wakes_total", "Wake-up messages queued to realtime sockets."),
		drops: d("syncgo_realtime_drops_total", "Commits a socket got as a wake-up instead of a delta, by reason "+
			"(queue_full, too_large, unencodable, behind, in_round).", "reason"),
		closes: d("syncgo_realtime_closes_total", "Sockets closed by the server, by reason (slow, protocol, busy).", "reason"),
		gaps:   d("syncgo_realtime_notification_gaps_total", "Commit notifications given up on (the sockets got catch-up wake-ups)."),
		compressed: d("syncgo_realtime_compressed_total", "Messages compressed for sockets (/realtime, /operations/realtime) that negotiated permessage-deflate "+
			"(once per message, whatever the number of sockets it goes to)."),
		narrowed: d("syncgo_realtime_narrowed_total", "Times a socket's registrations were narrowed or dropped after its grants changed."),
		memoryReleases: d("syncgo_memory_releases_total", "Times free memory was returned to the system after a burst, by what "+
			"the burst was (connections: socket connects and disconnects and HTTP connections opened and closed; requests: "+
			"requests in flight at once that drained) (realtime.release_after_churn).", "after"),
		memoryReleaseSeconds: d("syncgo_memory_release_seconds_total", "Time the memory releases after bursts took (two full collections each, and the return of the free pages)."),
		listenerConnects: d("syncgo_commit_listener_connects_total", "Times a commit listener of a shared store (Postgres) began "+
			"listening, its first connect and each reconnect, by listener (realtime, watches): each one checks for commits of other "+
			"instances missed while it was not listening.", "listener"),
		listenerUp: d("syncgo_commit_listener_up", "Whether a commit listener of a shared store (Postgres) is connected and listening now "+
			"(1) or not (0), by listener (realtime, watches). While it is 0, commits of other instances reach this instance's "+
			"sockets only when their clients pull; readiness does not fail for it.", "listener"),

		storeWrites:      d("syncgo_store_writes_total", "Store writes that committed: one per pushed commit, or one per run of up to 64 commits of one request."),
		storeWriteErrors: d("syncgo_store_write_errors_total", "Store write transactions that failed."),
		storeBatches:     d("syncgo_store_batches_total", "Database transactions that committed writes (group commit: fewer than writes)."),
		storeCommits:     d("syncgo_store_commits_total", "Commits appended to the log."),
		storeRecentWindows: d("syncgo_store_recent_windows_total", "Commit windows cut from the commits the store's writer keeps in "+
			"memory instead of read from the log (SQLite)."),
		storeSharedReads: d("syncgo_store_shared_read_answers_total", "Reads answered by one read shared with the others asked at the "+
			"same time, by read (window: short commit windows, entry: request entries).", "read"),
		storeConnRetries: d("syncgo_store_connection_retries_total", "Store operations run again on another database connection after "+
			"the one they ran on was lost (Postgres: a terminated backend, a restart, a failover)."),

		poolConns:          d("syncgo_db_pool_connections", "Database pool connections by state (acquired, idle, constructing).", "state"),
		poolMax:            d("syncgo_db_pool_max_connections", "Database pool capacity."),
		poolAcquires:       d("syncgo_db_pool_acquires_total", "Connections acquired from the pool."),
		poolAcquireSeconds: d("syncgo_db_pool_acquire_seconds_total", "Total time spent acquiring connections."),
		poolWaits:          d("syncgo_db_pool_waits_total", "Acquisitions that waited because no connection was idle."),
		poolWaitSeconds:    d("syncgo_db_pool_wait_seconds_total", "Total time acquisitions waited for a connection."),
		poolCanceled:       d("syncgo_db_pool_canceled_acquires_total", "Acquisitions given up because their context ended."),
		poolNewConns:       d("syncgo_db_pool_new_connections_total", "Database connections opened."),

		pageCache: d("syncgo_segment_cache_requests_total", "Bootstrap segment page look-ups, by result: hit (built or being built for "+
			"another client) or miss (built for this one).", "result"),
		readAhead: d("syncgo_pull_read_ahead_total", "Commit windows of catch-ups, by result: read (read ahead, while the client "+
			"read an earlier window), used (taken by the client's request for it instead of reading it) or precompressed (used, and "+
			"answered with its response body encoded and compressed while it was read ahead).", "result"),
		catchUpResets: d("syncgo_pull_catchup_resets_total", "Pulls far behind answered with a reset (a fresh bootstrap) instead of "+
			"the replay of the log (§8.4, limits.catchup_bootstrap_after)."),
		images: d("syncgo_sqlite_images_total", "SQLite image bootstrap outcomes: built, reused, rows_lane (too large, served as rows).", "result"),

		admCapacity: d("syncgo_admission_capacity", "Concurrent /sync requests allowed (Config.MaxConcurrentRequests)."),
		admInFlight: d("syncgo_admission_in_flight", "/sync requests being served now."),
		admQueued:   d("syncgo_admission_queue_depth", "/sync requests waiting for a slot now."),
		admRefused: d("syncgo_admission_rate_limited_total", "/sync requests refused with sync.rate_limited, by reason "+
			"(queue_full, queue_timeout, actor_rate, global_rate, body_memory).", "reason"),
		bodyMemory: d("syncgo_request_body_bytes", "Request body bytes held now and counted against Config.MaxBodyMemory "+
			"(each body's first 64 KiB are not counted)."),
		socketsRefused: d("syncgo_realtime_sockets_refused_total", "Socket upgrades (/realtime, /operations/realtime) refused with sync.websocket_connection_limit, "+
			"by the cap reached (total, actor).", "cap"),

		pushResultsPruned: d("syncgo_push_results_pruned_total", "Push-result journal records (sync_push_results) deleted by "+
			"retention.push_results_max_age, by this process."),

		ready: d("syncgo_ready", "1 when the server is ready to serve (as /readyz answers), 0 otherwise."),
		readyPhase: d("syncgo_readiness_phase", "1 for the phase a server that is not ready is in (starting, storage_migration, "+
			"backfill_checkpoint, database, stopping); no series when ready.", "phase"),
		pending:       d("syncgo_checkpoints_pending", "Backfill checkpoints at the running schema version not yet activated, in every partition."),
		schemaVersion: d("syncgo_schema_version", "Schema versions: running (this process) and stored (the database's marker).", "which"),
	}
}

// Describe implements prometheus.Collector.
func (c *serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.socketsOpen, c.deltas, c.wakes, c.drops, c.closes, c.gaps, c.narrowed, c.memoryReleases, c.memoryReleaseSeconds, c.listenerConnects, c.listenerUp,
		c.storeWrites, c.storeWriteErrors, c.storeBatches, c.storeCommits, c.storeRecentWindows, c.storeSharedReads, c.storeConnRetries,
		c.poolConns, c.poolMax, c.poolAcquires, c.poolAcquireSeconds, c.poolWaits, c.poolWaitSeconds, c.poolCanceled, c.poolNewConns,
		c.pageCache, c.images, c.readAhead, c.catchUpResets, c.admCapacity, c.admInFlight, c.admQueued, c.admRefused, c.bodyMemory, c.socketsRefused, c.compressed, c.pushResultsPruned,
		c.ready, c.readyPhase, c.pending, c.schemaVersion} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *serverCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	s := c.s

	rt := s.hub.Stats()
	gauge(c.socketsOpen, float64(rt.Sessions))
	counter(c.deltas, rt.Deltas)
	counter(c.wakes, rt.Wakes)
	counter(c.drops, rt.DropsQueueFull, "queue_full")
	counter(c.drops, rt.DropsTooLarge, "too_large")
	counter(c.drops, rt.DropsUnencodable, "unencodable")
	counter(c.drops, rt.DropsBehind, "behind")
	counter(c.drops, rt.DropsInRound, "in_round")
	counter(c.closes, rt.ClosedSlow, "slow")
	counter(c.closes, rt.ClosedProtocol, "protocol")
	counter(c.closes, rt.ClosedBusy, "busy")
	counter(c.gaps, rt.NotificationGap)
	counter(c.narrowed, rt.Narrowed)
	counter(c.compressed, rt.Compressed)
	counter(c.memoryReleases, s.releaser.Released(memfree.Connections), memfree.Connections)
	counter(c.memoryReleases, s.releaser.Released(memfree.Requests), memfree.Requests)
	ch <- prometheus.MustNewConstMetric(c.memoryReleaseSeconds, prometheus.CounterValue, s.releaser.Spent().Seconds())
	if _, ok := s.cfg.Store.(store.CommitListener); ok {
		counter(c.listenerConnects, rt.ListenerConnects, "realtime")
		gauge(c.listenerUp, boolGauge(rt.ListenerUp), "realtime")
		if s.watch.listening() {
			counter(c.listenerConnects, s.watch.listenerConnects.Load(), "watches")
			gauge(c.listenerUp, boolGauge(s.watch.listenerUp.Load()), "watches")
		}
	}

	st := s.cfg.Store.Stats()
	counter(c.storeWrites, st.Writes)
	counter(c.storeWriteErrors, st.WriteErrors)
	counter(c.storeBatches, st.Batches)
	counter(c.storeCommits, st.Commits)
	counter(c.storeRecentWindows, st.RecentWindows)
	counter(c.storeSharedReads, st.SharedWindows, "window")
	counter(c.storeSharedReads, st.SharedEntries, "entry")
	counter(c.storeConnRetries, st.ConnRetries)

	if pr, ok := s.cfg.Store.(store.PoolReporter); ok {
		ps := pr.PoolStats()
		gauge(c.poolConns, float64(ps.AcquiredConns), "acquired")
		gauge(c.poolConns, float64(ps.IdleConns), "idle")
		gauge(c.poolConns, float64(ps.ConstructingConns), "constructing")
		gauge(c.poolMax, float64(ps.MaxConns))
		counter(c.poolAcquires, ps.AcquireCount)
		ch <- prometheus.MustNewConstMetric(c.poolAcquireSeconds, prometheus.CounterValue, ps.AcquireDuration.Seconds())
		counter(c.poolWaits, ps.EmptyAcquireCount)
		ch <- prometheus.MustNewConstMetric(c.poolWaitSeconds, prometheus.CounterValue, ps.EmptyAcquireWait.Seconds())
		counter(c.poolCanceled, ps.CanceledAcquireCount)
		counter(c.poolNewConns, ps.NewConns)
	}

	hits, misses := s.eng.PageCacheStats()
	counter(c.pageCache, hits, "hit")
	counter(c.pageCache, misses, "miss")
	raRead, raUsed, raPre := s.eng.ReadAheadStats()
	counter(c.readAhead, raRead, "read")
	counter(c.readAhead, raUsed, "used")
	counter(c.readAhead, raPre, "precompressed")
	counter(c.catchUpResets, s.eng.CatchUpResets())
	counter(c.pushResultsPruned, s.eng.PushResultsPruned())
	im := s.eng.SQLiteImageStats()
	counter(c.images, im.Built, "built")
	counter(c.images, im.Reused, "reused")
	counter(c.images, im.RowsLane, "rows_lane")

	adm := s.admit.stats()
	gauge(c.admCapacity, float64(adm.capacity))
	gauge(c.admInFlight, float64(adm.inFlight))
	gauge(c.admQueued, float64(adm.queued))
	counter(c.admRefused, adm.refusedFull, "queue_full")
	counter(c.admRefused, adm.refusedWait, "queue_timeout")
	rateActor, rateGlobal := s.rates.refused()
	counter(c.admRefused, rateActor, "actor_rate")
	counter(c.admRefused, rateGlobal, "global_rate")
	counter(c.admRefused, s.bodyMem.refused.Load(), "body_memory")
	gauge(c.bodyMemory, float64(s.bodyMem.inUse()))
	sockTotal, sockActor := s.sockets.refused()
	counter(c.socketsRefused, sockTotal, "total")
	counter(c.socketsRefused, sockActor, "actor")

	ctx, cancel := context.WithTimeout(context.Background(), scrapeReadyTimeout)
	defer cancel()
	rep := s.readiness(ctx)
	if rep.Ready {
		gauge(c.ready, 1)
	} else {
		gauge(c.ready, 0)
		gauge(c.readyPhase, 1, rep.Phase)
	}
	gauge(c.schemaVersion, float64(s.cfg.Schema.Version()), "running")
	if rep.gate != nil && rep.gate.Barrier {
		gauge(c.schemaVersion, float64(rep.gate.Gate.StoredSchemaVersion), "stored")
		gauge(c.pending, float64(len(rep.gate.Gate.Pending)))
	}
}

// boolGauge is a gauge's value of b: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
