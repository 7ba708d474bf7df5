// SPDX-License-Identifier: Apache-2.0
//! Logs to stderr. Under systemd (JOURNAL_STREAM names our stderr) lines carry
//! a `<N>` syslog priority prefix, which journald turns into the entry's
//! priority, and no colour or timestamp, which journald adds itself.

use std::{io::Write, os::fd::AsRawFd};

use log::{Level, LevelFilter, Log, Metadata, Record};

struct Logger {
    journal: bool,
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        // Libraries (aya, netlink) only get their warnings through: aya's
        // debug output repeats what our own errors already carry.
        let ours = record.target().starts_with("v6node");
        if !self.enabled(record.metadata()) || (!ours && record.level() > Level::Warn) {
            return;
        }
        let mut stderr = std::io::stderr().lock();
        let _ = if self.journal {
            let priority = match record.level() {
                Level::Error => 3,
                Level::Warn => 4,
                Level::Info => 6,
                Level::Debug | Level::Trace => 7,
            };
            writeln!(stderr, "<{priority}>{}", record.args())
        } else {
            writeln!(stderr, "{}: {}", record.level().as_str().to_lowercase(), record.args())
        };
    }

    fn flush(&self) {}
}

fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else { return false };
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our own stderr with a valid out pointer.
    if unsafe { libc::fstat(std::io::stderr().as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    dev.parse() == Ok(st.st_dev) && ino.parse() == Ok(st.st_ino)
}

pub fn init() {
    let logger = Box::new(Logger { journal: stderr_is_journal() });
    if log::set_boxed_logger(logger).is_ok() {
        log::set_max_level(LevelFilter::Info);
    }
}

pub fn set_level(level: &str) {
    log::set_max_level(level.parse().unwrap_or(LevelFilter::Info));
}
