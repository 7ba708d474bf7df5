// SPDX-License-Identifier: Apache-2.0
//! `v6node-dataplane`: the one owner of v6node's eBPF dataplane on a node.

mod attach;
mod bandwidth;
mod bigtcp;
mod bpf;
mod cluster;
mod conntrack;
mod counters;
mod daemon;
mod detach;
mod devices;
mod endpoints;
mod files;
mod filter;
mod flows;
mod linkinfo;
mod logging;
mod main_table;
mod metrics;
mod nat;
mod netdev;
mod paths;
mod policy;
mod reload;
mod selftest;
mod services;
mod state;
mod status;
mod sync;
mod verifier;
mod xdp_features;

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::paths::Paths;

/// v6node's eBPF dataplane agent.
///
/// Loads v6node's BPF programs, attaches them to the node's devices with tcx
/// links (clsact on kernels before 6.6) and pins links and maps under the
/// pin directory, so traffic keeps flowing while the agent restarts. A new
/// agent adopts what it finds pinned; only `detach` removes it.
///
/// Configuration is TOML, merged in this order: /usr/lib/v6node/dataplane.toml
/// (vendor defaults), /run/v6node/dataplane.d/*.toml (this boot only: the
/// node's role and credentials), /etc/v6node/dataplane.toml,
/// /etc/v6node/dataplane.d/*.toml.
#[derive(Parser)]
#[command(version, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    paths: Paths,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the agent in the foreground (what the systemd unit starts).
    ///
    /// Attaches, then tells systemd READY=1. SIGHUP reloads the configuration;
    /// SIGTERM stops the agent and leaves the dataplane running as pinned.
    Run,
    /// Show what is attached, the BIG TCP sizes set, counters and the last reload.
    ///
    /// Exit status: 0 healthy, 1 degraded (last reload failed, or a device
    /// error), 3 agent not running.
    Status {
        /// Print JSON for machines instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Validate configuration without touching the dataplane.
    ///
    /// With no FILE, checks the installed files. With FILEs, checks them as
    /// if installed as the last drop-ins, so a fragment is judged in context.
    /// Errors name the file, the key and the reason.
    CheckConfig {
        files: Vec<PathBuf>,
        /// Print the effective merged configuration and where each key came from.
        #[arg(long)]
        print: bool,
    },
    /// Ask the running agent to reload its configuration and wait for the result.
    ///
    /// Same as `systemctl reload v6node-dataplane`. An invalid configuration is
    /// refused and the dataplane stays exactly as it was; the exit status is 1.
    Reload {
        /// Signal this process instead of the pid the agent recorded.
        #[arg(long)]
        pid: Option<i32>,
    },
    /// Remove every program, link and map v6node attached or pinned.
    ///
    /// Traffic then flows without v6node's programs. Refuses while the agent
    /// runs (stop it first: `systemctl stop v6node-dataplane`) unless --force.
    Detach {
        #[arg(long)]
        force: bool,
    },
    /// Answer load balancers' health checks (each healthCheckNodePort of a
    /// Service with externalTrafficPolicy Local) as kube-proxy does, from
    /// what the agent writes to health-checks.json in the state directory.
    ///
    /// Runs in its own unit (v6node-health-checks.service), without
    /// capabilities: the agent itself stays closed to the network.
    HealthChecks,
    /// End the connections Services gave backends that have left them: one
    /// request from the agent on stdin, the answer on stdout.
    ///
    /// Started per request by v6node-end-connections.socket, with the
    /// CAP_SYS_ADMIN that entering pods' network namespaces takes and that
    /// the agent itself does not hold.
    EndConnections,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init();
    let result = match cli.command {
        Command::Run => daemon::run(&cli.paths).map(|()| ExitCode::SUCCESS),
        Command::Status { json } => status::show(&cli.paths, json),
        Command::CheckConfig { files, print } => check_config(&cli.paths, &files, print),
        Command::Reload { pid } => reload::request_reload(&cli.paths, pid),
        Command::Detach { force } => detach::detach_all(&cli.paths, force).map(|()| ExitCode::SUCCESS),
        Command::HealthChecks => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(services::health_checks::run(&cli.paths)))
            .map(|()| ExitCode::SUCCESS),
        Command::EndConnections => services::connections::serve(&cli.paths.pin_dir).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            log::error!("{error:#}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(paths: &Paths, files: &[PathBuf], print: bool) -> anyhow::Result<ExitCode> {
    let loaded = v6node_config::load_with_extra(&paths.config_root, files)?;
    if print {
        println!("{}", toml::to_string_pretty(&loaded.config)?.trim_end());
        println!();
        for (key, file) in &loaded.origins {
            println!("# {key} from {}", file.display());
        }
    }
    let read: Vec<_> = loaded.files.iter().map(|f| f.display().to_string()).collect();
    if read.is_empty() {
        println!("ok: no configuration files; built-in defaults apply");
    } else {
        println!("ok: {}", read.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
