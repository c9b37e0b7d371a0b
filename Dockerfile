# syntax=docker/dockerfile:1
# Build:  docker build -t coloc-extender:0.1.0 .

############################ builder ############################
FROM rust:1-bookworm AS builder
WORKDIR /build

# 1. Dependency layer: rebuilt only when Cargo.toml / Cargo.lock change.
#    Build the locked dependency graph against stub sources. Every target Cargo.toml declares
#    explicitly ([lib], [[bin]], [[bench]], [[test]], [[example]]) gets a stub, because cargo
#    refuses a manifest whose declared target files are missing. Afterwards forget the stub
#    build of this crate so the real sources are always recompiled, whatever their mtimes
#    (COPY keeps the build context's timestamps, which may be older than the stub build).
#    The other workspace members (test bed, measuring tools) only need a manifest and an
#    empty lib for cargo to load the workspace; they are never built here.
COPY Cargo.toml Cargo.lock ./
COPY testbed/Cargo.toml testbed/
COPY bench/Cargo.toml bench/
RUN set -eu; \
    mkdir -p src testbed/src bench/src; echo 'fn main() {}' > src/main.rs; \
    : > testbed/src/lib.rs; : > bench/src/lib.rs; \
    awk -F'"' ' \
      function flush() { if (kind != "") print kind, (path != "" ? path : (kind == "lib" ? "src/lib.rs" : dir "/" name ".rs")); kind = ""; name = ""; path = "" } \
      /^\[/ { flush() } \
      /^\[lib\]/         { kind = "lib" } \
      /^\[\[bin\]\]/     { kind = "main"; dir = "src/bin" } \
      /^\[\[bench\]\]/   { kind = "main"; dir = "benches" } \
      /^\[\[test\]\]/    { kind = "main"; dir = "tests" } \
      /^\[\[example\]\]/ { kind = "main"; dir = "examples" } \
      kind != "" && /^name[ \t]*=/ { name = $2 } \
      kind != "" && /^path[ \t]*=/ { path = $2 } \
      END { flush() }' Cargo.toml | \
    while read -r kind file; do \
      [ -e "$file" ] && continue; mkdir -p "$(dirname "$file")"; \
      if [ "$kind" = lib ]; then : > "$file"; else echo 'fn main() {}' > "$file"; fi; \
    done; \
    cargo build --release --locked; \
    rm -rf target/release/.fingerprint/coloc-extender-* \
           target/release/deps/coloc_extender-* target/release/deps/libcoloc_extender-* \
           target/release/coloc-extender target/release/coloc-extender.d

# 2. The crate itself (.dockerignore keeps target/ and .git/ out of the context).
COPY . .
RUN cargo build --release --locked --bin coloc-extender \
 && cp target/release/coloc-extender /coloc-extender

############################ runtime ############################
# glibc + libgcc, no shell, runs as 65532 (nonroot). TLS is rustls: no OpenSSL needed.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="coloc-extender" \
      org.opencontainers.image.description="kube-scheduler extender for co-located online/offline workloads" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /coloc-extender /usr/local/bin/coloc-extender
# Default policy; in Kubernetes the ConfigMap mounted at /etc/coloc-extender replaces it.
COPY policy/default.yaml /etc/coloc-extender/policy.yaml

USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/coloc-extender"]
CMD ["serve", "--listen", "0.0.0.0:8443", "--policy", "/etc/coloc-extender/policy.yaml"]
