# syntax=docker/dockerfile:1
# The mailjar image: the static binary (scripts/build-static.sh) in an empty
# image, listening on all addresses, as a non-root user, with a HEALTHCHECK
# through `mailjar health`.
#
#   docker build -t mailjar .
#   docker run --rm -p 1025:1025 -p 8025:8025 mailjar
#   docker run --rm -p 1025:1025 -p 8025:8025 -v mail:/data -e MAILJAR_DATA_DIR=/data mailjar
#
# scripts/build-image.sh assembles the same image without Docker: it reads the
# last stage of this file (COPY, USER, ENV, EXPOSE, VOLUME, HEALTHCHECK,
# ENTRYPOINT, CMD, LABEL) and takes the build stage's files from the host build.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools file \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cp "$(./scripts/build-static.sh | tail -n 1)" /mailjar && mkdir -p /rootfs/data /rootfs/tmp

FROM scratch
COPY --from=build /mailjar /mailjar
COPY --from=build --chown=65532:65532 /rootfs/data /data
COPY --from=build --chmod=1777 /rootfs/tmp /tmp
USER 65532:65532
ENV MAILJAR_SMTP_HOST=0.0.0.0 MAILJAR_HTTP_HOST=0.0.0.0
EXPOSE 1025/tcp 8025/tcp
VOLUME ["/data"]
LABEL org.opencontainers.image.title="mailjar" \
      org.opencontainers.image.description="Capture email from applications under test and read it back over a JSON HTTP API" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/mailjar", "health"]
ENTRYPOINT ["/mailjar"]
