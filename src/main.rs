//! The `iuid-router` command line (SPEC §3): serve, demo, check, decode, resolve, mint.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use arc_swap::ArcSwap;
use clap::{Parser, Subcommand};
use iuid_router::config::RouterConfig;
use iuid_router::source::SourceErrors;
use iuid_router::table::{load_file, RoutingTable};
use iuid_router::{demo, inspect, proxy::Proxy, server};

#[derive(Parser)]
#[command(
    name = "iuid-router",
    version,
    about = "Routes each request to the region that owns its iUID"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const DEFAULT_CONFIG: &str = "config/router.yaml";

#[derive(Subcommand)]
enum Command {
    /// Run the router.
    Serve {
        /// Router config (SPEC §4).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Run the router with three embedded regional echo clusters, and print ids to try.
    Demo {
        /// Where the router listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
    /// Validate the router config and its routing table.
    Check {
        /// Router config (SPEC §4).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Print an iUID's fields as JSON.
    Decode {
        /// The id, in any accepted text form.
        id: String,
        /// Also name the country and service from this config's routing table.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the routing decision for an id as JSON.
    Resolve {
        /// Router config (SPEC §4).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// The id, in any accepted text form.
        id: String,
    },
    /// Run one regional echo server (the upstreams of docker-compose.yml and the demo).
    Echo {
        /// The region name it answers with.
        #[arg(long)]
        region: String,
        /// Where it listens.
        #[arg(long, default_value = "0.0.0.0:8080")]
        listen: SocketAddr,
    },
    /// Print fresh iUIDs, one a line, strictly increasing.
    Mint {
        /// Country id, 0–255.
        #[arg(long)]
        country: u8,
        /// Service entity id, 0–255.
        #[arg(long)]
        service: u8,
        /// How many.
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => runtime(serve(&config)),
        Command::Demo { listen } => runtime(async move { demo::run(listen).await }),
        Command::Echo { region, listen } => runtime(async move {
            let listener = server::bind(listen).await?;
            tracing::info!(%listen, %region, "echo server");
            demo::echo_server(&region, listener).await?;
            Ok(())
        }),
        Command::Check { config } => check(&config),
        Command::Decode { id, config } => decode(&id, config.as_deref()),
        Command::Resolve { config, id } => resolve(&config, &id),
        Command::Mint {
            country,
            service,
            count,
        } => mint(country, service, count),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn runtime<F>(fut: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), Box<dyn std::error::Error>>>,
{
    init_tracing();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads config and table, or every error found.
fn load(config: &Path) -> Result<(RouterConfig, RoutingTable), SourceErrors> {
    let config = RouterConfig::load(config)?;
    let table = load_file(&config.routing_table)?;
    Ok((config, table))
}

async fn serve(config: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let (config, table) = load(config)?;
    let listener = server::bind(config.listen).await?;
    tracing::info!(
        listen = %listener.local_addr()?,
        region = %config.region,
        table_version = %table.version,
        "serving"
    );
    let proxy = Arc::new(Proxy::new(
        Arc::new(config),
        Arc::new(ArcSwap::from_pointee(table)),
    ));
    server::serve(listener, proxy).await;
    Ok(())
}

fn check(config_path: &Path) -> ExitCode {
    match load(config_path) {
        Ok((config, table)) => {
            println!(
                "{}: ok (listen {}, region {}, {} routes)",
                config_path.display(),
                config.listen,
                config.region,
                config.routes.len()
            );
            println!(
                "{}: ok (version {}, {} regions, {} countries, {} services, {} overrides, default region {})",
                config.routing_table.display(),
                table.version,
                table.regions.len(),
                table.country_count(),
                table.service_count(),
                table.overrides.len(),
                table.region(table.default_region).name
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{} error(s)", errors.0.len());
            ExitCode::FAILURE
        }
    }
}

fn print_json(v: &serde_json::Value) -> ExitCode {
    match serde_json::to_string_pretty(v) {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn decode(id: &str, config: Option<&Path>) -> ExitCode {
    let table = match config.map(load).transpose() {
        Ok(loaded) => loaded.map(|(_, t)| t),
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    match inspect::decode_text(id, table.as_ref()) {
        Ok(v) => print_json(&v),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn resolve(config: &Path, id: &str) -> ExitCode {
    let (_, table) = match load(config) {
        Ok(loaded) => loaded,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    match inspect::resolve_text(id, &table) {
        Ok(v) => print_json(&v),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn mint(country: u8, service: u8, count: u64) -> ExitCode {
    use std::io::Write;
    let generator = iuid::Generator::new(country, service);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for _ in 0..count {
        if writeln!(out, "{}", generator.mint()).is_err() {
            // stdout closed (e.g. `| head`): not an error worth a message.
            return ExitCode::SUCCESS;
        }
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}
