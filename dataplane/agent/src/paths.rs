// SPDX-License-Identifier: Apache-2.0
//! Where the agent keeps its pins, its runtime state and finds its config.
//! Overridable so tests can run agents side by side in network namespaces.

use std::path::PathBuf;

#[derive(clap::Args, Clone, Debug)]
pub struct Paths {
    /// bpffs directory for pinned links and maps.
    #[arg(long, global = true, env = "V6NODE_PIN_DIR", default_value = "/sys/fs/bpf/v6node")]
    pub pin_dir: PathBuf,
    /// Runtime directory for the agent's state file and sockets.
    #[arg(long, global = true, env = "V6NODE_STATE_DIR", default_value = "/run/v6node")]
    pub state_dir: PathBuf,
    /// Prefix for /usr/lib/v6node and /etc/v6node (configuration search root).
    #[arg(long, global = true, env = "V6NODE_CONFIG_ROOT", default_value = "/")]
    pub config_root: PathBuf,
    /// Where the CNI network configuration for v6node-cni is written once
    /// pods.prefix is known (the container runtime's CNI config directory).
    #[arg(long, global = true, env = "V6NODE_CNI_CONF_DIR", default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
}

impl Paths {
    pub fn links_dir(&self) -> PathBuf {
        self.pin_dir.join("links")
    }

    /// The Service socket hooks' cgroup links and their programs.
    pub fn cgroup_links_dir(&self) -> PathBuf {
        self.pin_dir.join("cgroup")
    }

    /// Each tcx link's program, pinned beside it so its tag can be read
    /// without CAP_SYS_ADMIN.
    pub fn programs_dir(&self) -> PathBuf {
        self.pin_dir.join("programs")
    }

    pub fn state_file(&self) -> PathBuf {
        self.state_dir.join("dataplane.json")
    }

    /// The endpoint API socket v6node-cni talks to.
    pub fn endpoints_socket(&self) -> PathBuf {
        self.state_dir.join("endpoints.sock")
    }

    /// Where `end-connections` listens (v6node-end-connections.socket).
    pub fn end_connections_socket(&self) -> PathBuf {
        self.state_dir.join("end-connections.sock")
    }

    /// The pods the agent routes, kept across agent restarts.
    pub fn endpoints_file(&self) -> PathBuf {
        self.state_dir.join("endpoints.json")
    }

    /// The CNI network configuration (a conflist) the agent writes.
    pub fn cni_conflist(&self) -> PathBuf {
        self.cni_conf_dir.join("10-v6node.conflist")
    }

    /// bird2's configuration from `[routing]`, for v6node-bgp.service.
    pub fn bird_config(&self) -> PathBuf {
        self.state_dir.join("bird.conf")
    }

    /// bird's control socket (v6node-bgp.service runs bird with it).
    pub fn bird_socket(&self) -> PathBuf {
        self.state_dir.join("bird.ctl")
    }

    /// The health checks `v6node-dataplane health-checks` answers.
    pub fn health_checks_file(&self) -> PathBuf {
        self.state_dir.join("health-checks.json")
    }

    /// unbound configuration carrying nat64.prefix, for the node's DNS64.
    pub fn dns64_file(&self) -> PathBuf {
        self.state_dir.join("dns64.conf")
    }
}
