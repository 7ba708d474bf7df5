// SPDX-License-Identifier: Apache-2.0
//! `[metrics]`: where the agent serves its metrics, if anywhere.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Serialize;
use toml::Table;

use crate::serialize::serialize_optional_displayed;
use crate::validator::{Result, Validator};

/// `sun_path` is 108 bytes and std needs room for the terminating NUL.
const UNIX_PATH_MAX: usize = 107;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Metrics {
    /// `None`: no metrics endpoint.
    #[serde(serialize_with = "serialize_optional_displayed")]
    pub listen: Option<MetricsListen>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MetricsListen {
    /// An absolute path, at most 107 bytes.
    Unix(PathBuf),
    /// Port is never 0.
    Tcp(SocketAddr),
}

/// The config form, except `""` (endpoint off), which is `Option::None`.
impl FromStr for MetricsListen {
    /// A human-readable reason.
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("`unix:` needs an absolute socket path, e.g. unix:/run/v6node/metrics.sock".into());
            }
            if !path.starts_with('/') {
                return Err(format!("unix socket path `{path}` is not absolute"));
            }
            if path.contains('\0') {
                return Err("unix socket path contains a NUL byte".into());
            }
            if path.len() > UNIX_PATH_MAX {
                return Err(format!("unix socket path is {} bytes; at most {UNIX_PATH_MAX} fit in sockaddr_un", path.len()));
            }
            return Ok(MetricsListen::Unix(path.into()));
        }
        match s.parse::<SocketAddr>() {
            Ok(a) if a.port() == 0 => Err(format!("port 0 in `{s}`; choose a fixed port such as 9462")),
            Ok(a) => Ok(MetricsListen::Tcp(a)),
            Err(_) => Err(format!(
                "cannot parse `{s}`; expected \"\" (off), \"unix:/absolute/path.sock\", \
                 or an address with a port such as \"[::1]:9462\" or \"127.0.0.1:9462\""
            )),
        }
    }
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsListen::Unix(p) => write!(f, "unix:{}", p.display()),
            MetricsListen::Tcp(a) => write!(f, "{a}"),
        }
    }
}

pub(crate) fn read(v: &Validator, root: &Table, metrics: &mut Metrics) -> Result<()> {
    let Some(t) = v.section(root, "metrics", &["listen"])? else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "metrics.listen")? {
        metrics.listen = match s {
            "" => None,
            s => Some(s.parse().map_err(|r| v.err("metrics.listen", r))?),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::MetricsListen;
    use crate::testutil::{bad, ok};

    #[test]
    fn metrics_listen_forms() {
        let listen = |s: &str| ok(&format!("metrics.listen = {s:?}")).metrics.listen;
        assert_eq!(listen(""), None);
        assert_eq!(listen("[::1]:9462"), Some(MetricsListen::Tcp("[::1]:9462".parse().unwrap())));
        assert_eq!(listen("127.0.0.1:9462"), Some(MetricsListen::Tcp("127.0.0.1:9462".parse().unwrap())));
        assert_eq!(listen("unix:/a.sock"), Some(MetricsListen::Unix("/a.sock".into())));
    }

    #[test]
    fn bad_metrics_listen() {
        let bad_listen = |s: &str, part: &str| {
            bad(&format!("metrics.listen = {s:?}"), "metrics.listen", part);
        };
        bad_listen("unix:", "`unix:` needs an absolute socket path");
        bad_listen("unix:run/m.sock", "unix socket path `run/m.sock` is not absolute");
        bad("metrics.listen = \"unix:/run/m\\u0000.sock\"", "metrics.listen", "NUL");
        bad_listen(&format!("unix:/{}", "x".repeat(107)), "108 bytes; at most 107");
        bad_listen("[::1]:0", "port 0");
        bad_listen("::1", "expected \"\" (off), \"unix:/absolute/path.sock\", or an address with a port");
        bad_listen("localhost:9462", "cannot parse `localhost:9462`");
        bad_listen(" [::1]:9462", "cannot parse");
    }
}
