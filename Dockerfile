# A small static image of samplectl. Not built or tested here: this machine has no container engine.
FROM rust:1.95-alpine AS build
# make: jemalloc (the allocator, see Cargo.toml) is built from its C sources with configure and make.
RUN apk add --no-cache musl-dev make
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY manifests ./manifests
RUN cargo build --release --locked && strip target/release/samplectl

FROM scratch
COPY --from=build /src/target/release/samplectl /samplectl
USER 65532:65532
ENTRYPOINT ["/samplectl"]
