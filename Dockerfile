# syncgo: a static binary on a distroless base, run as a non-root user.
#
#   docker build -t syncgo .
#   docker run -p 8787:8787 -v syncgo-data:/var/lib/syncgo syncgo serve -dev -listen 0.0.0.0:8787 -db /var/lib/syncgo/syncgo.db
#
# For production, mount a config file (docs/configuration.md) and run
# `serve -config /etc/syncgo/syncgo.yaml`; deploy/compose.yaml runs two
# instances on one Postgres.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
# modernc.org/sqlite is pure Go: no cgo, a static binary.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/syncgo ./cmd/syncgo

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/syncgo /usr/local/bin/syncgo
# The SQLite default's data directory, writable by the nonroot user.
COPY --from=build --chown=65532:65532 /tmp /var/lib/syncgo
USER 65532:65532
EXPOSE 8787
ENTRYPOINT ["/usr/local/bin/syncgo"]
CMD ["serve", "-config", "/etc/syncgo/syncgo.yaml"]
