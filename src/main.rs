//! The `iuid-router` command line (docs/cli.md): serve, demo, check, decode, resolve, mint.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use iuid_router::app::App;
use iuid_router::config::{LogFormat, RouterConfig};
use iuid_router::proxy::route::Routes;
use iuid_router::scheme::mint::MintSpec;
use iuid_router::scheme::{Kind, IUID};
use iuid_router::source::SourceErrors;
use iuid_router::table::{load_file, RoutingTable};
use iuid_router::{demo, inspect, server};

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
        /// Router config (docs/config.md).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Take the listening sockets over from the router running on the config's
        /// `upgrade_socket`, which then drains and exits (docs/upgrades.md).
        #[arg(long)]
        upgrade: bool,
    },
    /// Start a new router (this binary, this config) that takes the running one's sockets
    /// over; returns once it serves, or fails with the new config's errors and changes
    /// nothing (docs/upgrades.md; systemd's `ExecReload`).
    Upgrade {
        /// Router config (docs/config.md); it must set `upgrade_socket`.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Run the router with three embedded regional echo clusters, and print ids to try.
    Demo {
        /// Where the router listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Where the admin API listens.
        #[arg(long, default_value = "127.0.0.1:9901")]
        admin_listen: SocketAddr,
    },
    /// Validate the router config and its routing table.
    Check {
        /// Router config (docs/config.md).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Print an id's fields and creation time as JSON (also `inspect`, the console's name).
    #[command(visible_alias = "inspect")]
    Decode {
        /// The id, in any accepted text form.
        id: String,
        /// Its scheme: `iuid`, or one the routing table declares (then give --config).
        #[arg(long, default_value = "iuid")]
        scheme: String,
        /// The config whose routing table names countries and services and declares schemes.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the routing decision for an id as JSON.
    Resolve {
        /// Router config (docs/config.md).
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// The id, in any accepted text form.
        id: String,
        /// Its scheme: `iuid`, or one the routing table declares.
        #[arg(long, default_value = "iuid")]
        scheme: String,
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
    /// Print fresh, valid ids of a scheme, one a line (iUIDs strictly increasing).
    Mint {
        /// The scheme: `iuid`, or one the routing table declares (then give --config).
        #[arg(long, default_value = "iuid")]
        scheme: String,
        /// The config whose routing table declares the scheme.
        #[arg(long)]
        config: Option<PathBuf>,
        /// iuid: country id, 0–255.
        #[arg(long, default_value_t = 0)]
        country: u8,
        /// iuid: service entity id, 0–255.
        #[arg(long, default_value_t = 0)]
        service: u8,
        /// guid_shard: the shard key (u32).
        #[arg(long, default_value_t = 0)]
        shard_key: u32,
        /// uniqid_shard: the shard digit (below total_shards).
        #[arg(long, default_value_t = 0)]
        shard: u8,
        /// composite: the key, e.g. a device id.
        #[arg(long, default_value = "device-1")]
        key: String,
        /// snowflake: a field value, `NAME=VALUE` (repeat; `time` defaults to now).
        #[arg(long = "field", value_parser = parse_field)]
        fields: Vec<(String, u64)>,
        /// How many.
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
}

/// jemalloc, not glibc's malloc: what an edge holds while it waits is resident only where
/// written, and what a burst freed goes back to the OS by itself (src/memory.rs). The
/// `system-allocator` feature keeps the system's, for tools that trace `malloc`
/// (`valgrind --tool=dhat`).
#[cfg(all(not(feature = "system-allocator"), not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start: its `const char *malloc_conf` (prefixed as the
/// crate builds it), a thin pointer to a NUL-terminated string. One background thread hands
/// freed pages back to the OS after 1 s (`dirty_decay_ms`; the default, 10 s, would leave a
/// burst's memory resident that long), with no second, "muzzy" stage.
#[cfg(all(not(feature = "system-allocator"), not(target_env = "msvc")))]
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &u8 =
    &b"background_thread:true,max_background_threads:1,dirty_decay_ms:1000,muzzy_decay_ms:0\0"[0];

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Upgrade { config } => upgrade(&config),
        Command::Serve { config, upgrade } => match RouterConfig::load(&config) {
            Ok(config) => {
                init_tracing(config.log_format);
                if let Some((soft, hard)) = iuid_router::nofile::raise_to_hard() {
                    tracing::info!(soft, hard, "open files limit (RLIMIT_NOFILE)");
                }
                iuid_router::overload::start(config.overload.max_memory_mb);
                runtime(serve(config, upgrade))
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::FAILURE
            }
        },
        Command::Demo {
            listen,
            admin_listen,
        } => {
            init_tracing(LogFormat::Text);
            runtime(async move { demo::run(listen, admin_listen).await })
        }
        Command::Echo { region, listen } => runtime(async move {
            init_tracing(LogFormat::Text);
            let listener = server::bind(listen, iuid_router::config::DEFAULT_BACKLOG).await?;
            tracing::info!(%listen, %region, "echo server");
            demo::echo_server(&region, listener).await?;
            Ok(())
        }),
        Command::Check { config } => check(&config),
        Command::Decode { id, scheme, config } => decode(&scheme, &id, config.as_deref()),
        Command::Resolve { config, id, scheme } => resolve(&config, &scheme, &id),
        Command::Mint {
            scheme,
            config,
            country,
            service,
            shard_key,
            shard,
            key,
            fields,
            count,
        } => {
            let spec = MintSpec {
                country,
                service,
                shard_key,
                shard,
                key,
                fields,
                at_ms: None,
            };
            mint(&scheme, config.as_deref(), &spec, count)
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`), as text or JSON lines.
fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a terminal: escape codes in a log file or journald are noise.
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => fmt.json().try_init(),
        LogFormat::Text => fmt.try_init(),
    };
}

fn runtime<F>(fut: F) -> ExitCode
where
    F: std::future::Future<Output = Result<(), Box<dyn std::error::Error>>>,
{
    // Single-threaded: the data path runs on `workers` of its own (src/workers.rs); this
    // runtime only accepts, and runs the admin API, reloads and signals.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(fut);
    // Background tasks (watchers, the admin API) end with the runtime; don't wait on them.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Loads config, routes and table, or every error found in them (the routes and the table
/// are checked even when the config has errors, if they can be read).
fn load(config_path: &Path) -> Result<(RouterConfig, Routes, RoutingTable), SourceErrors> {
    match RouterConfig::load(config_path) {
        Ok(config) => {
            let routes = Routes::for_config(&config);
            let table = load_file(&config.routing_table);
            let (routes, table) = match (routes, table) {
                (Ok(routes), Ok(table)) => (routes, table),
                (routes, table) => {
                    let mut errors = routes.err().map(|e| e.0).unwrap_or_default();
                    errors.extend(table.err().map(|e| e.0).unwrap_or_default());
                    return Err(SourceErrors(errors));
                }
            };
            // Across the two files: every scheme a route names is declared in the table.
            routes
                .scheme_uses()
                .check(&table.scheme_names(), &table.timeless_schemes())?;
            Ok((config, routes, table))
        }
        Err(mut errors) => {
            if let Some(entries) = RouterConfig::routes_of(config_path) {
                let limits = iuid_router::config::Limits::default().parse_limits();
                let table = RouterConfig::table_path_of(config_path).unwrap_or_default();
                if let Err(more) = Routes::compile(&entries, limits, &table) {
                    errors.0.extend(more.0);
                }
            }
            if let Some(table) = RouterConfig::table_path_of(config_path) {
                if let Err(more) = load_file(&table) {
                    errors.0.extend(more.0);
                }
            }
            Err(errors)
        }
    }
}

async fn serve(config: RouterConfig, upgrade: bool) -> Result<(), Box<dyn std::error::Error>> {
    App::new(config)?.serve(upgrade).await?;
    Ok(())
}

/// `upgrade`: checks the config as `check` does (its errors change nothing), then starts
/// `serve --upgrade` in a process group of its own and waits for the line it writes once
/// it serves; the new process's log goes where this one's stderr goes.
fn upgrade(config_path: &Path) -> ExitCode {
    use std::io::BufRead;
    let config = match load(config_path) {
        Ok((config, _, _)) => config,
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!(
                "{} error(s); the running router is unchanged",
                errors.0.len()
            );
            return ExitCode::FAILURE;
        }
    };
    if config.upgrade_socket.is_none() {
        eprintln!(
            "{}: upgrade needs upgrade_socket (docs/upgrades.md)",
            config_path.display()
        );
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: cannot find this binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = std::process::Command::new(exe);
    command
        .args(["serve", "--upgrade", "--config"])
        .arg(config_path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    // Not in this command's process group: a terminal's Ctrl-C, or systemd ending
    // ExecReload's group, must not reach the new router.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("error: cannot start the new process: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("upgraded:") {
                println!("{line}");
                return ExitCode::SUCCESS;
            }
        }
    }
    match child.wait() {
        Ok(status) => eprintln!(
            "the new process ended ({status}) before serving; the running router is unchanged"
        ),
        Err(e) => eprintln!("error: waiting for the new process: {e}"),
    }
    ExitCode::FAILURE
}

fn check(config_path: &Path) -> ExitCode {
    match load(config_path) {
        Ok((config, routes, table)) => {
            println!(
                "{}: ok (listen {}, region {}, {} routes)",
                config_path.display(),
                config.listen,
                config.region,
                routes.len()
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

/// The routing table of `config`, if one is given; errors are printed (exit 1).
fn load_table_of(config: Option<&Path>) -> Result<Option<RoutingTable>, ExitCode> {
    match config.map(load).transpose() {
        Ok(loaded) => Ok(loaded.map(|(_, _, t)| t)),
        Err(errors) => {
            eprintln!("{errors}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// `NAME=VALUE` of `mint --field`.
fn parse_field(text: &str) -> Result<(String, u64), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: expected NAME=VALUE"))?;
    let value = value
        .parse()
        .map_err(|e| format!("`{value}` is not a number: {e}"))?;
    Ok((name.to_owned(), value))
}

fn decode(scheme: &str, id: &str, config: Option<&Path>) -> ExitCode {
    let table = match load_table_of(config) {
        Ok(table) => table,
        Err(code) => return code,
    };
    match inspect::decode_text(scheme, id, table.as_ref()) {
        Ok(v) => print_json(&v),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn resolve(config: &Path, scheme: &str, id: &str) -> ExitCode {
    let (_, _, table) = match load(config) {
        Ok(loaded) => loaded,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    match inspect::resolve_text(scheme, id, &table) {
        Ok(v) => print_json(&v),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn mint(scheme: &str, config: Option<&Path>, spec: &MintSpec, count: u64) -> ExitCode {
    use std::io::Write;
    let table = match load_table_of(config) {
        Ok(table) => table,
        Err(code) => return code,
    };
    let kind = match (scheme, &table) {
        (IUID, _) => Kind::Iuid,
        (name, Some(t)) => match t.scheme(name) {
            Some((_, kind)) => kind.clone(),
            None => {
                eprintln!(
                    "error: the routing table declares no scheme `{name}` (schemes: {})",
                    t.scheme_names().join(", ")
                );
                return ExitCode::FAILURE;
            }
        },
        (name, None) => {
            eprintln!("error: scheme `{name}` is declared in a routing table: give --config");
            return ExitCode::FAILURE;
        }
    };
    let ids = match iuid_router::scheme::mint::mint(&kind, spec, count) {
        Ok(ids) => ids,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for id in ids {
        if writeln!(out, "{id}").is_err() {
            // stdout closed (e.g. `| head`): not an error worth a message.
            return ExitCode::SUCCESS;
        }
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}
