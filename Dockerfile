# The iuid-router image: built from source, shipped on distroless (glibc and CA certificates;
# no shell, no package manager), running as the non-root user 65532. The stripped binary is
# about 8 MB; nothing else is added to the base image but the example config.
#
#   docker build -t iuid-router .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin iuid-router \
    && strip target/release/iuid-router

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/iuid-router /usr/local/bin/iuid-router
COPY config /etc/iuid-router/config
COPY routing-table.yaml /etc/iuid-router/routing-table.yaml
USER 65532:65532
EXPOSE 8080 9901
ENTRYPOINT ["/usr/local/bin/iuid-router"]
CMD ["serve", "--config", "/etc/iuid-router/config/router.yaml"]
