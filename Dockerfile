# The `ldp` binary in a small image: `docker build -t ldp .` then `docker run -p 8090:8090 ldp`.
# Arguments after the image name replace the default `serve --bind 0.0.0.0:8090` (RELEASING.md).

# Build stage: the toolchain the workspace's MSRV and lock file were tested with.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --profile dist --locked -p ldp-cli --bin ldp

# Runtime stage: no compiler, no shell tools beyond Debian's base, an unprivileged user. CA certificates for
# `--store rediss://` and LLM providers over HTTPS (the system's roots); /var/lib/ldp, the user's own, for
# `--store sqlite:/var/lib/ldp/state.db` (mount a volume there to keep it across containers).
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin ldp \
    && mkdir -p /var/lib/ldp \
    && chown ldp /var/lib/ldp
COPY --from=build /src/target/dist/ldp /usr/local/bin/ldp
USER ldp
VOLUME /var/lib/ldp
EXPOSE 8090
ENTRYPOINT ["ldp"]
CMD ["serve", "--bind", "0.0.0.0:8090"]
