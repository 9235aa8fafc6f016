# baton image: the sidecar (entrypoint), the operator (/usr/local/bin/operator, as the chart runs it) and the baton CLI.
# Build: docker build -t baton .   (the RUN line below is `make build`'s command, verbatim)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o bin/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sidecar"]
