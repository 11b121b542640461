# Builds the iuid-router binary and ships it on a slim image.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin iuid-router

FROM debian:bookworm-slim
COPY --from=build /src/target/release/iuid-router /usr/local/bin/iuid-router
COPY config /etc/iuid-router/config
COPY routing-table.yaml /etc/iuid-router/routing-table.yaml
EXPOSE 8080 9901
ENTRYPOINT ["iuid-router"]
CMD ["serve", "--config", "/etc/iuid-router/config/router.yaml"]
