# syntax=docker/dockerfile:1
FROM golang:1.27.3 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The data directory is the service's alone (0700, as serve makes it
# outside a container): a volume created from it keeps the mode.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/reconciler ./cmd/reconciler \
 && mkdir -p /out/data && chmod 700 /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/reconciler /usr/local/bin/reconciler
COPY --from=build --chown=nonroot:nonroot /out/data /data
WORKDIR /data
VOLUME ["/data"]
USER nonroot:nonroot
EXPOSE 8080
ENV RECONCILER_DATA=/data RECONCILER_HTTP=0.0.0.0:8080
ENTRYPOINT ["/usr/local/bin/reconciler"]
CMD ["serve"]
