# baton image: the sidecar (entrypoint), the operator (/usr/local/bin/operator, as the chart runs it) and the baton CLI.
# Build: docker build -t baton .   (the RUN line below is `make build`'s command, verbatim)
#        add --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) for --version
#
# Both bases are pinned by digest (the tag is kept for the reader; the digest wins), so a rebuild
# of the same commit starts from the same bytes. The digests are the multi-platform index digests.
# To move to a newer base: crane digest <name:tag>, replace the digest, and run
# go test ./internal/build/imagebuild/ (it checks that every FROM is pinned and that the builder's Go is
# at least go.mod's).
FROM golang:1.26.8-bookworm@sha256:f4191582e1522dfc5980a6bdc0309a756f9697f3e7d0f199c7e26fc82ab324fd AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# What every binary states for --version (the build context has no .git, so without them it says
# "devel commit unknown"): docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) .
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/baton-dev/baton/internal/version.release=${VERSION} -X github.com/baton-dev/baton/internal/version.commit=${COMMIT}" -o bin/ ./cmd/...

FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /src/bin/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sidecar"]
