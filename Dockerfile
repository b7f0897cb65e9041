# samplectl's image: the binary and the glibc libraries it links, on nothing else (no shell, no package
# manager), run as a non-root user; the manifests run it with a read-only root filesystem.
#
#   docker build -t samplectl:latest .
#
# scripts/image builds this same file here, where no base image can be pulled: it runs the build
# stage's steps on this machine (Debian 12, Rust 1.95, as the rust:1.95-bookworm image is) and hands
# their result in as BINARY, so that the stages after it are the ones `docker build` runs
# (docs/deploying.md says what differs).
ARG BINARY=build

FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin samplectl && scripts/image-rootfs target/release/samplectl /out

# The files of the image, from the build stage above or, with --build-arg BINARY=..., an image holding
# them at /out already.
FROM ${BINARY} AS binary

FROM scratch
COPY --from=binary /out/ /
USER 65532:65532
ENTRYPOINT ["/samplectl"]
