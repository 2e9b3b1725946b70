// Package faultsuite holds the fault suite (tests only): many clients of
// internal/sspclient with seeded random operations, offline periods and
// injected faults (dropped, duplicated and truncated requests and
// answers, severed connections and, on Postgres, terminated backends)
// against a server over real HTTP, on both storage drivers. It checks that
// no client ever holds a row outside its grants and that, after a final
// quiet sync without faults, every client holds exactly the server's rows
// within its grants.
//
//	go test ./internal/faultsuite                                   # small: 20 clients, a few seconds
//	go test ./internal/faultsuite -faults.clients 40 -faults.steps 150   # medium (.ci/run)
//	go test ./internal/faultsuite -faults.large -timeout 30m        # large
//	go test ./internal/faultsuite -faults.seed N -v                 # reproduce a failure's choices
package faultsuite
