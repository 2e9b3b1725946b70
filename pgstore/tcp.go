package pgstore

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of the TCP settings of the connections Open makes from URL
// (and of the listen connection). A connection whose network goes silent
// (no reset, no FIN) is otherwise held until TCP gives up: about 15
// minutes of retransmissions on Linux, or never while the other side's
// kernel keeps advertising a zero window. Neither bound ends a long
// statement of a Postgres that answers: the user timeout counts only the
// time data sent stays unacknowledged, and a live server's kernel
// acknowledges at once, and answers keepalive probes.
const (
	// defaultTCPUserTimeout bounds how long data sent on a connection
	// may stay unacknowledged before the connection is closed
	// (TCP_USER_TIMEOUT, Linux; URL: tcp_user_timeout, in milliseconds).
	defaultTCPUserTimeout = 60 * time.Second
	// defaultKeepAliveIdle, defaultKeepAliveInterval and
	// defaultKeepAliveCount: an idle connection (waiting for an answer
	// included) is probed after 30 s of silence, every 10 s, and closed
	// after 3 unanswered probes (URL: keepalives_idle and
	// keepalives_interval in seconds, keepalives_count; keepalives=0
	// turns keepalives off).
	defaultKeepAliveIdle     = 30 * time.Second
	defaultKeepAliveInterval = 10 * time.Second
	defaultKeepAliveCount    = 3
)

// setTCP makes cc, parsed from a URL, dial with TCP keepalives and a TCP
// user timeout: the defaults above, or the URL's parameters (removed from
// the settings sent to Postgres).
func setTCP(cc *pgconn.Config) error {
	// The URL parameters read here are libpq's names; pgx passes the
	// parameters it does not know to Postgres as settings, which Postgres
	// (or a pooler) would refuse, so they are removed.
	params := map[string]string{}
	for _, k := range []string{"tcp_user_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"} {
		if v, ok := cc.RuntimeParams[k]; ok {
			params[k] = v
			delete(cc.RuntimeParams, k)
		}
	}
	userTimeout := defaultTCPUserTimeout
	ka := net.KeepAliveConfig{Enable: true, Idle: defaultKeepAliveIdle, Interval: defaultKeepAliveInterval, Count: defaultKeepAliveCount}
	num := func(k string, unit time.Duration, dst *time.Duration) error {
		v, ok := params[k]
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%s=%q: want a non-negative integer", k, v)
		}
		*dst = time.Duration(n) * unit
		return nil
	}
	if err := num("tcp_user_timeout", time.Millisecond, &userTimeout); err != nil {
		return err
	}
	if err := num("keepalives_idle", time.Second, &ka.Idle); err != nil {
		return err
	}
	if err := num("keepalives_interval", time.Second, &ka.Interval); err != nil {
		return err
	}
	if v, ok := params["keepalives_count"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("keepalives_count=%q: want a non-negative integer", v)
		}
		ka.Count = n
	}
	if v, ok := params["keepalives"]; ok {
		switch v {
		case "0":
			ka = net.KeepAliveConfig{Enable: false, Idle: -1}
		case "1":
		default:
			return fmt.Errorf("keepalives=%q: want 0 or 1", v)
		}
	}
	d := &net.Dialer{Timeout: cc.ConnectTimeout, KeepAliveConfig: ka, Control: userTimeoutControl(userTimeout)}
	if !ka.Enable {
		d.KeepAlive = -1
	}
	cc.DialFunc = d.DialContext
	return nil
}
