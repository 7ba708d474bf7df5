// SPDX-License-Identifier: Apache-2.0
//! `[log]`: how much the agent logs.

use serde::Serialize;
use toml::Table;

use crate::keywords::keywords;
use crate::validator::{Result, Validator};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Log {
    pub level: LogLevel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

keywords!(LogLevel, "log level", {
    Error => "error",
    Warn => "warn",
    Info => "info",
    Debug => "debug",
    Trace => "trace",
});

pub(crate) fn read(v: &Validator, root: &Table, log: &mut Log) -> Result<()> {
    let Some(t) = v.section(root, "log", &["level"])? else {
        return Ok(());
    };
    if let Some(s) = v.string(t, "log.level")? {
        log.level = s.parse().map_err(|r| v.err("log.level", r))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::bad;

    #[test]
    fn bad_log_level() {
        bad("log.level = \"verbose\"", "log.level", "expected one of error, warn, info, debug, trace");
    }
}
