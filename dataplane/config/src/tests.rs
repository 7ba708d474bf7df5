// SPDX-License-Identifier: Apache-2.0

use std::fs;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::*;

const NAME: &str = "/etc/v6node/dataplane.d/50-test.toml";

fn ok(text: &str) -> Config {
    match parse_str(Path::new(NAME), text) {
        Ok(l) => l.config,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[track_caller]
fn assert_err(e: &ConfigError, file: &Path, key: Option<&str>, part: &str) {
    assert_eq!(e.file, file, "wrong file in: {e}");
    assert_eq!(e.key.as_deref(), key, "wrong key in: {e}");
    assert!(e.reason.contains(part), "reason lacks {part:?}: {e}");
}

/// One file on top of the defaults must fail at `key` with `part` in the reason.
#[track_caller]
fn bad(text: &str, key: &str, part: &str) -> ConfigError {
    let e = parse_str(Path::new(NAME), text).expect_err(text);
    assert_err(&e, Path::new(NAME), Some(key), part);
    e
}

/// A root directory with config files in it.
struct Tree(TempDir);

impl Tree {
    fn new() -> Self {
        Tree(tempfile::tempdir().unwrap())
    }

    fn root(&self) -> &Path {
        self.0.path()
    }

    fn write(&self, rel: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.root().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        path
    }

    fn vendor(&self, text: &str) -> PathBuf {
        self.write("usr/lib/v6node/dataplane.toml", text)
    }

    fn etc(&self, text: &str) -> PathBuf {
        self.write("etc/v6node/dataplane.toml", text)
    }

    fn dropin(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        self.write(&format!("etc/v6node/dataplane.d/{name}"), text)
    }

    fn load(&self) -> LoadedConfig {
        load(self.root()).unwrap_or_else(|e| panic!("unexpected error: {e}"))
    }

    fn load_err(&self) -> ConfigError {
        load(self.root()).expect_err("config should be rejected")
    }
}

fn strs(patterns: &[DevicePattern]) -> Vec<&str> {
    patterns.iter().map(DevicePattern::as_str).collect()
}

// --- the file stack and merging ---

#[test]
fn defaults_without_files() {
    let t = Tree::new();
    let l = t.load();
    assert!(l.files.is_empty());
    assert!(l.origins.is_empty());
    let c = l.config;
    assert_eq!(c, Config::default());
    assert_eq!(strs(&c.attach.devices), ["en*", "eth*"]);
    assert_eq!(c.attach.mode, AttachMode::Auto);
    assert_eq!(strs(&c.bigtcp.devices), ["en*", "eth*"]);
    assert_eq!(c.bigtcp.size, 196608);
    assert_eq!(c.bigtcp.size, BIGTCP_DEFAULT);
    assert!(c.filter.deny_sources.is_empty());
    assert_eq!(c.metrics.listen, None);
    assert_eq!(c.log.level, LogLevel::Info);
}

#[test]
fn empty_file_is_read_and_changes_nothing() {
    let t = Tree::new();
    let etc = t.etc("# nothing here\n");
    let l = t.load();
    assert_eq!(l.files, [etc]);
    assert_eq!(l.config, Config::default());
}

#[test]
fn vendor_only() {
    let t = Tree::new();
    let vendor = t.vendor("[bigtcp]\nsize = 131072\n[log]\nlevel = \"debug\"\n");
    let l = t.load();
    assert_eq!(l.files, [vendor.as_path()]);
    assert_eq!(l.config.bigtcp.size, 131072);
    assert_eq!(l.config.log.level, LogLevel::Debug);
    assert_eq!(strs(&l.config.bigtcp.devices), ["en*", "eth*"]);
    assert_eq!(l.origins.get("bigtcp.size"), Some(&vendor));
    assert_eq!(l.origins.get("bigtcp.devices"), None);
}

#[test]
fn override_order_vendor_etc_dropins_by_name() {
    let t = Tree::new();
    let vendor = t.vendor("[bigtcp]\nsize = 100000\n[log]\nlevel = \"debug\"\n[attach]\nmode = \"clsact\"\n");
    let etc = t.etc("[bigtcp]\nsize = 200000\n[log]\nlevel = \"warn\"\n");
    // Created out of order; byte order puts "9-" after "20-".
    let z = t.dropin("9-z.toml", "[bigtcp]\nsize = 400000\n");
    let b = t.dropin("20-b.toml", "[bigtcp]\nsize = 300000\n[log]\nlevel = \"trace\"\n");
    let a = t.dropin("10-a.toml", "[bigtcp]\nsize = 250000\n");
    let l = t.load();
    assert_eq!(l.files, [vendor.clone(), etc, a, b.clone(), z.clone()]);
    assert_eq!(l.config.bigtcp.size, 400000);
    assert_eq!(l.config.log.level, LogLevel::Trace);
    assert_eq!(l.config.attach.mode, AttachMode::Clsact);
    assert_eq!(l.origins["bigtcp.size"], z);
    assert_eq!(l.origins["log.level"], b);
    assert_eq!(l.origins["attach.mode"], vendor);
}

#[test]
fn nested_tables_merge_keeping_earlier_siblings() {
    let t = Tree::new();
    let vendor = t.vendor("[bigtcp]\ndevices = [\"enp*\"]\nsize = 100000\n");
    let etc = t.etc("bigtcp.size = 200000\n");
    let l = t.load();
    assert_eq!(strs(&l.config.bigtcp.devices), ["enp*"]);
    assert_eq!(l.config.bigtcp.size, 200000);
    assert_eq!(l.origins["bigtcp.devices"], vendor);
    assert_eq!(l.origins["bigtcp.size"], etc);
}

#[test]
fn arrays_replace_instead_of_appending() {
    let t = Tree::new();
    t.vendor("[attach]\ndevices = [\"en*\", \"eth*\", \"wl*\"]\n[filter]\ndeny_sources = [\"2001:db8:1::/48\"]\n");
    let d = t.dropin("50-x.toml", "[attach]\ndevices = [\"eth0\"]\n[filter]\ndeny_sources = []\n");
    let l = t.load();
    assert_eq!(strs(&l.config.attach.devices), ["eth0"]);
    assert!(l.config.filter.deny_sources.is_empty());
    assert_eq!(l.origins["attach.devices"], d);
    assert_eq!(l.origins["filter.deny_sources"], d);
}

#[test]
fn later_table_replaces_earlier_scalar_and_its_origins() {
    // Invalid on its own, but the later table replaces it whole.
    let t = Tree::new();
    t.vendor("attach = 5\n");
    let etc = t.etc("[attach]\nmode = \"tcx\"\n");
    let l = t.load();
    assert_eq!(l.config.attach.mode, AttachMode::Tcx);
    assert!(!l.origins.contains_key("attach"));
    assert_eq!(l.origins["attach.mode"], etc);
}

#[test]
fn later_scalar_replaces_earlier_table() {
    let t = Tree::new();
    t.vendor("[attach]\nmode = \"tcx\"\n");
    let etc = t.etc("attach = 5\n");
    assert_err(&t.load_err(), &etc, Some("attach"), "expected a table, found an integer");
}

#[test]
fn non_toml_and_hidden_files_are_ignored() {
    let t = Tree::new();
    let d = t.dropin("10-ok.toml", "[log]\nlevel = \"error\"\n");
    for name in ["README", "20-x.toml.bak", "30-x.toml~", ".40-hidden.toml", ".toml", "50-x.conf"] {
        t.dropin(name, "this is not toml = = =");
    }
    fs::create_dir(t.root().join("etc/v6node/dataplane.d/60-subdir")).unwrap();
    let l = t.load();
    assert_eq!(l.files, [d]);
    assert_eq!(l.config.log.level, LogLevel::Error);
}

#[test]
fn load_with_extra_applies_last() {
    let t = Tree::new();
    t.etc("[log]\nlevel = \"debug\"\n");
    t.dropin("99-last.toml", "[log]\nlevel = \"warn\"\n");
    // Not a drop-in name: extra files need no .toml suffix.
    let extra = t.write("candidate.conf", "[log]\nlevel = \"trace\"\n");
    let l = load_with_extra(t.root(), std::slice::from_ref(&extra)).unwrap();
    assert_eq!(l.config.log.level, LogLevel::Trace);
    assert_eq!(l.files.last(), Some(&extra));
    assert_eq!(l.origins["log.level"], extra);
}

#[test]
fn missing_extra_file_is_an_error() {
    let t = Tree::new();
    t.etc("[log]\nlevel = \"debug\"\n");
    let missing = t.root().join("nope.toml");
    let e = load_with_extra(t.root(), std::slice::from_ref(&missing)).unwrap_err();
    assert_err(&e, &missing, None, "cannot read file");
}

#[test]
fn origins_point_at_the_setting_file() {
    let t = Tree::new();
    let vendor = t.vendor("[attach]\ndevices = [\"en*\"]\nmode = \"tcx\"\n[metrics]\nlisten = \"[::1]:9462\"\n");
    let etc = t.etc("[attach]\nmode = \"clsact\"\n");
    let d = t.dropin("10-filter.toml", "filter = { deny_sources = [\"2001:db8::/32\"] }\n");
    let l = t.load();
    let expected: BTreeMap<String, PathBuf> =
        [("attach.devices", &vendor), ("attach.mode", &etc), ("filter.deny_sources", &d), ("metrics.listen", &vendor)]
            .into_iter()
            .map(|(k, f)| (k.to_owned(), f.clone()))
            .collect();
    assert_eq!(l.origins, expected);
}

#[test]
fn parse_str_names_its_file() {
    let l = parse_str(Path::new(NAME), "[log]\nlevel = \"warn\"\n").unwrap();
    assert_eq!(l.files, [PathBuf::from(NAME)]);
    assert_eq!(l.origins["log.level"], Path::new(NAME));
}

// --- accepted values ---

#[test]
fn accepted_values() {
    let c = ok(r#"
        [attach]
        devices = ["enp[0-9]s*", "averyveryverylongname*", "lo"]
        mode = "tcx"
        [bigtcp]
        devices = []
        size = 524280
        [filter]
        deny_sources = ["2001:DB8:bad::/48", "2001:db8::1/128", "fe80::/10"]
        [metrics]
        listen = "unix:/run/v6node/metrics.sock"
        [log]
        level = "trace"
    "#);
    assert_eq!(strs(&c.attach.devices), ["enp[0-9]s*", "averyveryverylongname*", "lo"]);
    assert_eq!(c.attach.mode, AttachMode::Tcx);
    assert!(c.bigtcp.devices.is_empty());
    assert_eq!(c.bigtcp.size, BIGTCP_MAX);
    let nets: Vec<String> = c.filter.deny_sources.iter().map(|n| n.to_string()).collect();
    assert_eq!(nets, ["2001:db8:bad::/48", "2001:db8::1/128", "fe80::/10"]);
    assert_eq!(c.metrics.listen, Some(MetricsListen::Unix("/run/v6node/metrics.sock".into())));
    assert_eq!(c.log.level, LogLevel::Trace);
    assert_eq!(ok("bigtcp.size = 65536").bigtcp.size, BIGTCP_MIN);
}

#[test]
fn metrics_listen_forms() {
    let listen = |s: &str| ok(&format!("metrics.listen = {s:?}")).metrics.listen;
    assert_eq!(listen(""), None);
    assert_eq!(listen("[::1]:9462"), Some(MetricsListen::Tcp("[::1]:9462".parse().unwrap())));
    assert_eq!(listen("127.0.0.1:9462"), Some(MetricsListen::Tcp("127.0.0.1:9462".parse().unwrap())));
    assert_eq!(listen("unix:/a.sock"), Some(MetricsListen::Unix("/a.sock".into())));
}

#[test]
fn device_pattern_matching() {
    let c = ok("attach.devices = [\"en*\", \"eth[0-3]\", \"lo\"]");
    let p = &c.attach.devices;
    assert!(p[0].matches("enp1s0"));
    assert!(!p[0].matches("lo"));
    assert!(p[1].matches("eth2"));
    assert!(!p[1].matches("eth4"));
    assert!(p[2].matches("lo"));
    assert!(!p[2].matches("lo0"));
}

#[test]
fn serialize_round_trip() {
    let c = ok(r#"
        attach = { devices = ["eth[0-1]"], mode = "clsact" }
        bigtcp = { devices = [], size = 65536 }
        filter.deny_sources = ["2001:DB8::/32", "2001:db8:1::1/128"]
        metrics.listen = "[2001:db8::1]:9462"
        log.level = "error"
    "#);
    let text = toml::to_string(&c).unwrap();
    assert!(text.contains("\"2001:db8::/32\""), "{text}");
    assert!(text.contains("listen = \"[2001:db8::1]:9462\""), "{text}");
    assert_eq!(ok(&text), c);

    let d = Config::default();
    let text = toml::to_string(&d).unwrap();
    assert!(text.contains("listen = \"\""), "{text}");
    assert_eq!(ok(&text), d);

    let u = ok("metrics.listen = \"unix:/run/m.sock\"");
    assert_eq!(ok(&toml::to_string(&u).unwrap()), u);
}

// --- rejected input: every case names file, key and reason ---

#[test]
fn unknown_keys() {
    bad(
        "foo = 1",
        "foo",
        "unknown key `foo`; expected one of attach, bigtcp, filter, nat64, nat46, pods, kubernetes, routing, services, metrics, log",
    );
    bad("[foo]", "foo", "unknown key `foo`");
    bad("[bigtcp]\nsise = 1", "bigtcp.sise", "unknown key `sise`; expected one of devices, size");
    bad("attach.device = []", "attach.device", "expected one of devices, mode");
    bad("filter.deny = []", "filter.deny", "expected one of deny_sources");
    bad("metrics.port = 1", "metrics.port", "expected one of listen");
    bad("log.levle = \"info\"", "log.levle", "expected one of level");
}

#[test]
fn unknown_key_names_the_file_that_set_it() {
    let t = Tree::new();
    let a = t.dropin("10-a.toml", "[bigtcp]\nsise = 1\n");
    t.dropin("20-b.toml", "[bigtcp]\nsize = 70000\n");
    assert_err(&t.load_err(), &a, Some("bigtcp.sise"), "unknown key `sise`");
    // An unknown section is blamed on the last file writing into it.
    let t = Tree::new();
    t.vendor("[extra]\nx = 1\n");
    let etc = t.etc("[extra]\ny = 1\n");
    t.dropin("10-a.toml", "[log]\nlevel = \"warn\"\n");
    assert_err(&t.load_err(), &etc, Some("extra"), "unknown key `extra`");
}

#[test]
fn wrong_types() {
    bad("bigtcp.size = \"big\"", "bigtcp.size", "expected an integer, found a string");
    bad("bigtcp.size = true", "bigtcp.size", "expected an integer, found a boolean");
    bad("bigtcp.size = 1.5", "bigtcp.size", "expected an integer, found a float");
    bad("bigtcp.size = { a = 1 }", "bigtcp.size", "expected an integer, found a table");
    bad("attach = 1", "attach", "expected a table, found an integer");
    bad("log = \"info\"", "log", "expected a table, found a string");
    bad("attach.mode = { x = 1 }", "attach.mode", "expected a string, found a table");
    bad("attach.mode = [\"tcx\"]", "attach.mode", "expected a string, found an array");
    bad("attach.devices = \"en*\"", "attach.devices", "expected an array of strings, found a string");
    bad("attach.devices = [\"en*\", 3]", "attach.devices[1]", "expected a string, found an integer");
    bad("bigtcp.devices = [[\"en*\"]]", "bigtcp.devices[0]", "expected a string, found an array");
    bad("filter.deny_sources = \"2001:db8::/32\"", "filter.deny_sources", "expected an array of strings");
    bad("filter.deny_sources = [{}]", "filter.deny_sources[0]", "expected a string, found a table");
    bad("metrics.listen = 9462", "metrics.listen", "expected a string, found an integer");
    bad("log.level = 1979-05-27", "log.level", "expected a string, found a datetime");
}

#[test]
fn bad_device_patterns() {
    for section in ["attach", "bigtcp"] {
        let key = format!("{section}.devices[1]");
        let bad_dev = |item: &str, part: &str| {
            bad(&format!("{section}.devices = [\"en*\", {item:?}]"), &key, part);
        };
        bad_dev("", "empty pattern");
        bad_dev("a/b", "contains `/`");
        bad_dev("eth0 ", "contains whitespace");
        bad_dev("eth\t0", "contains whitespace");
        bad_dev("eth0:1", "contains `:`");
        bad_dev("averyverylongname", "is 17 bytes; at most 15");
        bad_dev("en[", "invalid glob `en[`");
        bad_dev("en*", "duplicate pattern `en*` (also item 0)");
    }
    // 15 bytes is fine, 16 is not.
    ok("attach.devices = [\"abcdefghijklmno\"]");
    bad("attach.devices = [\"abcdefghijklmnop\"]", "attach.devices[0]", "16 bytes");
}

#[test]
fn bad_attach_mode() {
    bad("attach.mode = \"xdp\"", "attach.mode", "unknown attach mode `xdp`; expected one of auto, tcx, clsact");
    bad("attach.mode = \"TCX\"", "attach.mode", "expected one of auto, tcx, clsact");
}

#[test]
fn bad_bigtcp_size() {
    bad("bigtcp.size = 65535", "bigtcp.size", "65535 is out of range; expected 65536..=524280");
    bad("bigtcp.size = 524281", "bigtcp.size", "524281 is out of range");
    bad("bigtcp.size = -1", "bigtcp.size", "-1 is out of range");
    bad("bigtcp.size = 0", "bigtcp.size", "0 is out of range");
    bad("bigtcp.size = 99999999999", "bigtcp.size", "99999999999 is out of range");
    bad("bigtcp.size = 65536.0", "bigtcp.size", "found a float");
}

#[test]
fn bad_deny_sources() {
    let bad_net = |item: &str, part: &str| {
        bad(&format!("filter.deny_sources = [\"2001:db8:1::/48\", {item:?}]"), "filter.deny_sources[1]", part);
    };
    bad_net("2001:db8::1", "missing prefix length; write 2001:db8::1/128 for one address");
    bad_net("10.0.0.0/8", "IPv4 prefix on an IPv6-only dataplane");
    bad_net("10.0.0.1", "IPv4 address on an IPv6-only dataplane");
    bad_net("2001:db8::1/32", "host bits set; did you mean 2001:db8::/32?");
    bad_net("2001:db8::/129", "prefix length `129` is not a number in 0..=128");
    bad_net("2001:db8::/+32", "prefix length `+32`");
    bad_net("2001:db8::/", "prefix length ``");
    bad_net("2001:db8::/32/1", "prefix length `32/1`");
    bad_net("2001:zz8::/32", "`2001:zz8::` is not an IPv6 address");
    bad_net("bad", "`bad` is not an IPv6 prefix");
    bad_net("::/0", "would drop every packet");
    bad_net("8000::/0", "would drop every packet");
    bad_net("2001:DB8:1::/48", "duplicate prefix 2001:db8:1::/48 (also item 0)");
}

#[test]
fn too_many_deny_sources() {
    let items = vec!["\"\""; v6node_abi::DENY_SRC_MAX as usize + 1].join(",");
    bad(&format!("filter.deny_sources = [{items}]"), "filter.deny_sources", "262145 prefixes; at most 262144");
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

#[test]
fn bad_log_level() {
    bad("log.level = \"verbose\"", "log.level", "expected one of error, warn, info, debug, trace");
}

#[test]
fn value_errors_come_in_schema_order() {
    // `log` before `attach` in the text; `attach` first in the schema.
    bad("[log]\nlevel = \"x\"\n[attach]\nmode = \"x\"\n", "attach.mode", "attach mode");
    bad("[metrics]\nlisten = \"x\"\n[log]\nlevel = \"x\"\n", "metrics.listen", "cannot parse");
    let t = Tree::new();
    t.vendor("[log]\nlevel = \"x\"\n");
    let d = t.dropin("10-a.toml", "[bigtcp]\nsize = 1\n");
    assert_err(&t.load_err(), &d, Some("bigtcp.size"), "out of range");
}

#[test]
fn value_error_names_the_file_that_set_the_array() {
    let t = Tree::new();
    let vendor = t.vendor("filter.deny_sources = [\"2001:db8::/32\", \"2001:db8::1\"]\n");
    t.etc("[log]\nlevel = \"warn\"\n");
    t.dropin("10-a.toml", "[filter]\n");
    assert_err(&t.load_err(), &vendor, Some("filter.deny_sources[1]"), "missing prefix length");
}

#[test]
fn syntax_errors() {
    let e = parse_str(Path::new(NAME), "[log]\nlevel = \n").unwrap_err();
    assert_err(&e, Path::new(NAME), None, "line 2, column 9: ");
    let e = parse_str(Path::new(NAME), "[log]\nlevel = \"a\"\nlevel = \"b\"\n").unwrap_err();
    assert_err(&e, Path::new(NAME), None, "line 3, column 1: ");
    assert!(e.reason.contains("duplicate key"), "{e}");
}

#[test]
fn syntax_errors_come_first_in_file_order() {
    let t = Tree::new();
    t.vendor("[log]\nlevel = \"bad value\"\n");
    let etc = t.etc("[attach\n");
    t.dropin("10-a.toml", "= 1\n");
    assert_err(&t.load_err(), &etc, None, "line 1, column");
}

#[test]
fn unreadable_files() {
    let t = Tree::new();
    let dir = t.root().join("etc/v6node/dataplane.d/10-dir.toml");
    fs::create_dir_all(&dir).unwrap();
    assert_err(&t.load_err(), &dir, None, "cannot read file");

    // Missing is skipped, but a path through a non-directory is a broken setup.
    let t = Tree::new();
    t.write("usr/lib", "not a directory");
    assert_err(&t.load_err(), &t.root().join("usr/lib/v6node/dataplane.toml"), None, "cannot read file");

    let t = Tree::new();
    let locked = t.dropin("10-locked.toml", "");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads files whatever their mode, so only check where that fails.
    if fs::read(&locked).is_err() {
        assert_err(&t.load_err(), &locked, None, "Permission denied");
    }
}

#[test]
fn dropin_path_that_is_not_a_directory() {
    let t = Tree::new();
    let d = t.write("etc/v6node/dataplane.d", "");
    assert_err(&t.load_err(), &d, None, "cannot read directory");
}

#[test]
fn non_utf8_file() {
    let t = Tree::new();
    let d = t.dropin("10-latin1.toml", b"# caf\xe9\n[log]\n");
    assert_err(&t.load_err(), &d, None, "not valid UTF-8 (line 1, byte offset 5)");
}

#[test]
fn display_is_one_line() {
    let e = parse_str(Path::new(NAME), "[log]\nlevel = \n").unwrap_err();
    let s = e.to_string();
    assert!(!s.contains('\n') && !s.contains('\r'), "{s:?}");
    assert!(s.starts_with(&format!("{NAME}: line 2, column 9: ")), "{s}");

    let e = bad("bigtcp.size = 1", "bigtcp.size", "out of range");
    assert_eq!(e.to_string(), format!("{NAME}: bigtcp.size: 1 is out of range; expected 65536..=524280 bytes"));

    let e = bad("\"a\\nb\" = 1", "a\nb", "unknown key");
    assert!(!e.to_string().contains('\n'), "{e}");
}

// --- nat64 ---

#[test]
fn nat64_defaults_to_off_under_the_well_known_prefix() {
    let c = Config::default();
    assert!(c.nat64.devices.is_empty());
    assert_eq!(c.nat64.prefix.to_string(), "64:ff9b::/96");
    assert!(c.nat64.eam.is_empty());
}

#[test]
fn nat64_section_with_prefix_and_mappings() {
    let c = ok(r#"
[nat64]
devices = ["eth0", "eth1"]
prefix = "64:ff9b:1::/48"
eam = [
  { ipv6 = "2001:db8:6::/120", ipv4 = "198.51.100.0/24" },
  { ipv6 = "2001:db8:80::80/128", ipv4 = "203.0.113.80/32" },
]
"#);
    assert_eq!(strs(&c.nat64.devices), ["eth0", "eth1"]);
    assert_eq!(c.nat64.prefix.to_string(), "64:ff9b:1::/48");
    let eam: Vec<String> = c.nat64.eam.iter().map(|e| format!("{} {}", e.ipv6, e.ipv4)).collect();
    assert_eq!(eam, ["2001:db8:6::/120 198.51.100.0/24", "2001:db8:80::80/128 203.0.113.80/32"]);
    for len in NAT64_PREFIX_LENGTHS {
        let prefix = if len == 32 { "2001:db8::".to_owned() } else { "2001:db8:100::".to_owned() };
        let net: ipnet::Ipv6Net = format!("{prefix}/{len}").parse().unwrap();
        let c = ok(&format!("[nat64]\nprefix = \"{}\"\n", net.trunc()));
        assert_eq!(c.nat64.prefix.prefix_len(), len);
    }
}

#[test]
fn bad_nat64_prefix() {
    bad("[nat64]\nprefix = \"64:ff9b::/80\"\n", "nat64.prefix", "not an RFC 6052 prefix length");
    bad("[nat64]\nprefix = \"64:ff9b::1/96\"\n", "nat64.prefix", "host bits set; did you mean 64:ff9b::/96?");
    bad("[nat64]\nprefix = \"192.0.2.0/24\"\n", "nat64.prefix", "not an IPv6 prefix");
    bad("[nat64]\nprefix = 96\n", "nat64.prefix", "expected a string, found an integer");
}

#[test]
fn bad_nat64_mappings() {
    let eam = |items: &str| format!("[nat64]\neam = [{items}]\n");
    bad(
        &eam(r#"{ ipv6 = "2001:db8::/120", ipv4 = "198.51.100.0/25" }"#),
        "nat64.eam[0]",
        "leaves 8 host bits but 198.51.100.0/25 leaves 7",
    );
    bad(&eam(r#"{ ipv6 = "2001:db8::/120" }"#), "nat64.eam[0].ipv4", "missing");
    bad(&eam(r#"{ ipv6 = "2001:db8::1", ipv4 = "192.0.2.1/32" }"#), "nat64.eam[0].ipv6", "write 2001:db8::1/128");
    bad(&eam(r#"{ ipv6 = "2001:db8::1/128", ipv4 = "192.0.2.1" }"#), "nat64.eam[0].ipv4", "write 192.0.2.1/32");
    bad(&eam(r#"{ ipv6 = "2001:db8::/64", ipv4 = "10.0.0.0/8" }"#), "nat64.eam[0].ipv6", "use /96 or longer");
    bad(&eam(r#"{ ipv6 = "2001:db8::1/120", ipv4 = "192.0.2.0/24" }"#), "nat64.eam[0].ipv6", "host bits set");
    bad(
        &eam(r#"{ ipv6 = "2001:db8::/120", ipv4 = "192.0.2.1/24" }"#),
        "nat64.eam[0].ipv4",
        "host bits set; did you mean 192.0.2.0/24?",
    );
    bad(&eam(r#"{ ipv6 = "2001:db8::1/128", ipv4 = "192.0.2.1/32", port = 80 }"#), "nat64.eam[0].port", "unknown key `port`");
    bad(
        &eam(r#"{ ipv6 = "2001:db8::1/128", ipv4 = "192.0.2.1/32" }, { ipv6 = "2001:db8::2/128", ipv4 = "192.0.2.1/32" }"#),
        "nat64.eam[1].ipv4",
        "mapped already (item 0)",
    );
    bad(&eam(r#""2001:db8::1/128 192.0.2.1/32""#), "nat64.eam[0]", "expected a table");
    bad("[nat64]\neam = \"2001:db8::/120\"\n", "nat64.eam", "expected an array of tables");
    bad("[nat64]\ndevices = [\"eth0:1\"]\n", "nat64.devices[0]", "contains `:`");
}

#[test]
fn runtime_dropins_sit_between_vendor_and_etc() {
    let t = Tree::new();
    let vendor = t.vendor("[nat64]\nprefix = \"64:ff9b::/96\"\n[log]\nlevel = \"warn\"\n");
    let role = t.write("run/v6node/dataplane.d/50-role-gateway.toml", "[nat64]\ndevices = [\"en*\"]\n[log]\nlevel = \"debug\"\n");
    let etc = t.etc("[log]\nlevel = \"error\"\n");
    let l = t.load();
    assert_eq!(l.files, [vendor, role.clone(), etc.clone()]);
    assert_eq!(strs(&l.config.nat64.devices), ["en*"]);
    assert_eq!(l.origins["nat64.devices"], role);
    assert_eq!(l.config.log.level, LogLevel::Error, "/etc wins over /run");
    assert_eq!(l.origins["log.level"], etc);
}

#[test]
fn pods_prefix_and_device() {
    let c = ok("[pods]\nprefix = \"fd00:10:244:1::/64\"\ndevice = \"veth\"\n");
    assert_eq!(c.pods.prefix, Some("fd00:10:244:1::/64".parse().unwrap()));
    assert_eq!(c.pods.device, PodDeviceChoice::Veth);
    assert_eq!(Config::default().pods.prefix, None);
    assert_eq!(Config::default().pods.device, PodDeviceChoice::Auto);
    assert_eq!(ok("[pods]\nprefix = \"\"\n").pods.prefix, None);
}

#[test]
fn kubernetes_kubeconfig_and_node_name() {
    assert_eq!(Config::default().kubernetes.kubeconfig, None, "off unless configured");
    let c = ok("[kubernetes]\nkubeconfig = \"/etc/kubernetes/v6node-dataplane.conf\"\nnode_name = \"node-1.rack-2\"\n");
    assert_eq!(c.kubernetes.kubeconfig, Some("/etc/kubernetes/v6node-dataplane.conf".into()));
    assert_eq!(c.kubernetes.node_name, "node-1.rack-2");
    assert_eq!(ok("[kubernetes]\nkubeconfig = \"\"\n").kubernetes.kubeconfig, None);
    bad("[kubernetes]\nkubeconfig = \"kubelet.conf\"\n", "kubernetes.kubeconfig", "is not an absolute path");
    bad("[kubernetes]\nnode_name = \"Node_1\"\n", "kubernetes.node_name", "is not a Node name");
    bad("[kubernetes]\nnode_name = \"-a\"\n", "kubernetes.node_name", "is not a Node name");
    bad("[kubernetes]\nserver = \"https://[::1]:6443\"\n", "kubernetes.server", "unknown key");
}

#[test]
fn services_cgroup_is_the_root_cgroup_unless_moved_or_turned_off() {
    assert_eq!(Config::default().services.cgroup, Some("/sys/fs/cgroup".into()), "every pod and the node itself");
    assert_eq!(
        ok("[services]\ncgroup = \"/sys/fs/cgroup/kubepods.slice\"\n").services.cgroup,
        Some("/sys/fs/cgroup/kubepods.slice".into())
    );
    assert_eq!(ok("[services]\ncgroup = \"\"\n").services.cgroup, None);
    bad("[services]\ncgroup = \"kubepods\"\n", "services.cgroup", "is not an absolute path");
    bad("[services]\nkube_proxy = true\n", "services.kube_proxy", "unknown key");
    let c = ok("[services]\ncgroup = \"\"\n");
    assert_eq!(ok(&toml::to_string(&c).unwrap()), c, "round trip through its own serialization");
}

#[test]
fn services_remote_backends_are_masqueraded_unless_dsr_is_chosen() {
    assert_eq!(Config::default().services.remote_backends, RemoteBackends::Masquerade, "works on any network");
    let c = ok("[services]\nremote_backends = \"dsr\"\n");
    assert_eq!(c.services.remote_backends, RemoteBackends::Dsr);
    assert_eq!(ok(&toml::to_string(&c).unwrap()), c, "round trip through its own serialization");
    bad("[services]\nremote_backends = \"snat\"\n", "services.remote_backends", "snat");
}

#[test]
fn pods_prefix_rejects_what_cannot_number_pods() {
    bad("[pods]\nprefix = \"10.244.0.0/24\"\n", "pods.prefix", "is not an IPv6 prefix");
    bad("[pods]\nprefix = \"fd00:10:244:1::5/64\"\n", "pods.prefix", "host bits set; the prefix is fd00:10:244:1::/64");
    bad("[pods]\nprefix = \"fd00:10:244:1::/124\"\n", "pods.prefix", "too few addresses");
    bad("[pods]\nprefix = \"fe80::/64\"\n", "pods.prefix", "not a unicast prefix");
    bad("[pods]\ndevice = \"macvlan\"\n", "pods.device", "unknown pod device `macvlan`; expected one of auto, netkit, veth");
    bad("[pods]\ncidr = \"fd00::/64\"\n", "pods.cidr", "unknown key");
}

#[test]
fn routing_bgp_is_off_unless_an_asn_is_set() {
    assert_eq!(Config::default().routing.bgp, None, "direct routes only");
    assert_eq!(ok("[routing]\n").routing.bgp, None);
    let c = ok(concat!(
        "[routing]\nasn = 4200000001\nrouter_id = \"0.0.0.10\"\n",
        "peers = [{ address = \"fd00:a1::1\", asn = 64512 }, { address = \"2001:db8::1\", asn = 4200000001 }]\n",
        "announce = [\"pod-prefixes\", \"2001:db8:ff::/64\"]\n",
    ));
    let bgp = c.routing.bgp.expect("bgp on");
    assert_eq!(bgp.asn, 4_200_000_001);
    assert_eq!(bgp.router_id, Some("0.0.0.10".parse().unwrap()));
    assert_eq!(
        bgp.peers,
        [
            BgpPeer { address: "fd00:a1::1".parse().unwrap(), asn: 64512 },
            BgpPeer { address: "2001:db8::1".parse().unwrap(), asn: 4_200_000_001 }
        ]
    );
    assert_eq!(bgp.announce, [Announce::PodPrefixes, Announce::Prefix("2001:db8:ff::/64".parse().unwrap())]);
    let defaults = ok("[routing]\nasn = 64601\npeers = [{ address = \"fd00:a1::1\", asn = 64512 }]\n").routing.bgp.unwrap();
    assert_eq!((defaults.router_id, defaults.announce), (None, vec![Announce::PodPrefixes]));
}

#[test]
fn routing_refuses_bad_asns_and_peers_with_the_reason() {
    let peer = "peers = [{ address = \"fd00:a1::1\", asn = 64512 }]\n";
    for (asn, why) in [
        ("0", "reserved (RFC 7607)"),
        ("23456", "AS_TRANS"),
        ("65535", "reserved (RFC 7300)"),
        ("4294967295", "reserved (RFC 7300)"),
        ("4294967296", "not an AS number"),
        ("-1", "not an AS number"),
        ("\"64512\"", "expected an integer, found a string"),
    ] {
        bad(&format!("[routing]\nasn = {asn}\n{peer}"), "routing.asn", why);
    }
    bad("[routing]\nasn = 64601\n", "routing.peers", "no peers; BGP needs at least one");
    bad("[routing]\nasn = 64601\npeers = []\n", "routing.peers", "no peers");
    bad(&format!("[routing]\n{peer}"), "routing.peers", "needs routing.asn");
    let with_peer =
        |item: &str| format!("[routing]\nasn = 64601\npeers = [{{ address = \"fd00:a1::1\", asn = 64512 }}, {item}]\n");
    bad(&with_peer("{ address = \"192.0.2.1\", asn = 64512 }"), "routing.peers[1].address", "is an IPv4 address");
    bad(&with_peer("{ address = \"fe80::1\", asn = 64512 }"), "routing.peers[1].address", "is link-local");
    bad(&with_peer("{ address = \"ff02::2\", asn = 64512 }"), "routing.peers[1].address", "not a unicast address");
    bad(&with_peer("{ address = \"router-1\", asn = 64512 }"), "routing.peers[1].address", "is not an IPv6 address");
    bad(&with_peer("{ address = \"fd00:a1::1\", asn = 64513 }"), "routing.peers[1].address", "is a peer already (item 0)");
    bad(&with_peer("{ address = \"fd00:a1::2\", asn = 0 }"), "routing.peers[1].asn", "reserved (RFC 7607)");
    bad(&with_peer("{ address = \"fd00:a1::2\" }"), "routing.peers[1].asn", "missing");
    bad(&with_peer("{ address = \"fd00:a1::2\", asn = 1, password = \"x\" }"), "routing.peers[1].password", "unknown key");
    let with = |line: &str| format!("[routing]\nasn = 64601\n{peer}{line}\n");
    bad(&with("router_id = \"0.0.0.0\""), "routing.router_id", "not a valid router ID");
    bad(&with("router_id = \"fd00::1\""), "routing.router_id", "is not a router ID");
    bad(&with("announce = [\"pods\"]"), "routing.announce[0]", "neither \"pod-prefixes\" nor an IPv6 prefix");
    bad(&with("announce = [\"2001:db8:ff::1/64\"]"), "routing.announce[0]", "host bits set");
    bad(&with("announce = [\"::/0\"]"), "routing.announce[0]", "default route");
    bad(&with("announce = [\"pod-prefixes\", \"pod-prefixes\"]"), "routing.announce[1]", "announced already (item 0)");
}

#[test]
fn nat64_translatable_ranges() {
    let c = ok("[nat64]\ntranslatable = [\"198.51.100.0/24\", \"203.0.113.10/32\"]\n");
    let ranges: Vec<String> = c.nat64.translatable.iter().map(ToString::to_string).collect();
    assert_eq!(ranges, ["198.51.100.0/24", "203.0.113.10/32"]);
    assert!(ok("").nat64.translatable.is_empty());
    let list = |items: &str| format!("[nat64]\ntranslatable = [{items}]\n");
    bad(&list(r#""198.51.100.0/24", "198.51.100.128/25""#), "nat64.translatable[1]", "overlaps 198.51.100.0/24 (item 0)");
    bad(&list(r#""198.51.100.1/24""#), "nat64.translatable[0]", "host bits set");
    bad(&list(r#""198.51.100.1""#), "nat64.translatable[0]", "write 198.51.100.1/32");
    bad(&list(r#""2001:db8::/120""#), "nat64.translatable[0]", "not an IPv4 prefix");
    bad("[nat64]\ntranslatable = \"198.51.100.0/24\"\n", "nat64.translatable", "array");
}

#[test]
fn nat64_stateful_pool_sources_ranges_and_lifetimes() {
    assert!(ok("").nat64.stateful.is_none());
    let c = ok("[nat64.stateful]\npool = [\"203.0.113.1\", \"203.0.113.2\"]\nsources = [\"fd00:10::/48\"]\n");
    let s = c.nat64.stateful.expect("stateful");
    assert_eq!(s.pool.len(), 2);
    assert_eq!(s.sources[0].to_string(), "fd00:10::/48");
    assert_eq!((s.tcp_ports.to_string(), s.udp_ports.count()), ("1024-65535".into(), 64512));
    assert_eq!(s.filtering, Nat64Filtering::EndpointIndependent);
    assert_eq!(
        (s.udp_seconds, s.tcp_established_seconds, s.tcp_transitory_seconds, s.icmp_seconds),
        (300, 7440, 240, 60),
        "RFC 6146's defaults"
    );
    let c = ok("[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00:10::/48\"]\nudp_ports = \"20000-20099\"\n\
                icmp_ids = \"0-99\"\nfiltering = \"address-dependent\"\nudp_seconds = 120\n");
    let s = c.nat64.stateful.unwrap();
    assert_eq!((s.udp_ports.first, s.udp_ports.last, s.icmp_ids.count()), (20000, 20099, 100));
    assert_eq!((s.filtering, s.udp_seconds), (Nat64Filtering::AddressDependent, 120));

    let with = |extra: &str| format!("[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00:10::/48\"]\n{extra}");
    bad("[nat64.stateful]\nsources = [\"fd00:10::/48\"]\n", "nat64.stateful.pool", "missing or empty");
    bad("[nat64.stateful]\npool = [\"203.0.113.1\"]\n", "nat64.stateful.sources", "missing or empty");
    bad(
        "[nat64.stateful]\npool = [\"203.0.113.0/30\"]\nsources = [\"fd00:10::/48\"]\n",
        "nat64.stateful.pool[0]",
        "list addresses",
    );
    bad(
        "[nat64.stateful]\npool = [\"203.0.113.1\", \"203.0.113.1\"]\nsources = [\"fd00::/8\"]\n",
        "nat64.stateful.pool[1]",
        "duplicate",
    );
    bad(
        "[nat64]\neam = [{ ipv6 = \"2001:db8:6::/120\", ipv4 = \"203.0.113.0/24\" }]\n[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"fd00::/8\"]\n",
        "nat64.stateful.pool[0]",
        "explicit address mapping of 203.0.113.0/24",
    );
    bad(&with("tcp_ports = \"0-100\"\n"), "nat64.stateful.tcp_ports", "expected 1 <= first");
    bad(&with("tcp_ports = \"2000-1000\"\n"), "nat64.stateful.tcp_ports", "first <= last");
    bad(&with("udp_ports = \"any\"\n"), "nat64.stateful.udp_ports", "not a range");
    bad(&with("filtering = \"symmetric\"\n"), "nat64.stateful.filtering", "endpoint-independent, address-dependent");
    bad(&with("udp_seconds = 0\n"), "nat64.stateful.udp_seconds", "out of range");
    bad(&with("window = 1\n"), "nat64.stateful.window", "unknown key");
    bad("[nat64.stateful]\npool = [\"203.0.113.1\"]\nsources = [\"::/0\"]\n", "nat64.stateful.sources[0]", "every IPv6 source");
    let five = "pool = [\"203.0.113.1\", \"203.0.113.2\", \"203.0.113.3\", \"203.0.113.4\", \"203.0.113.5\"]";
    bad(
        &format!("[nat64.stateful]\n{five}\nsources = [\"fd00::/8\"]\n"),
        "nat64.stateful.tcp_ports",
        "at most 262144 per protocol",
    );
}

#[test]
fn nat46_gateway_frontends_backends_and_weights() {
    assert!(ok("").nat46.is_none());
    let head = "[nat64]\ndevices = [\"eth0\"]\n[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n";
    let with = |extra: &str| format!("{head}{extra}");
    let c = ok(&with(
        "[[nat46.gateway]]\nfrontend = \"198.51.100.80:443\"\nbackends = [{ address = \"[2001:db8::a]:8443\", weight = 3 }, \
         { address = \"[2001:db8::b]:8443\" }, { address = \"[2001:db8::c]:8443\", weight = 0 }]\n\
         [[nat46.gateway]]\nfrontend = \"198.51.100.80:53\"\nprotocol = \"udp\"\n",
    ));
    let n = c.nat46.clone().expect("nat46");
    assert_eq!(n.source_prefix.to_string(), "2001:db8:46::/96");
    assert_eq!((n.udp_seconds, n.tcp_established_seconds, n.tcp_transitory_seconds), (300, 7440, 240));
    let g = &n.gateways[0];
    assert_eq!((g.frontend.to_string(), g.protocol), ("198.51.100.80:443".into(), Nat46Protocol::Tcp));
    let weights: Vec<u32> = g.backends.iter().map(|b| b.weight).collect();
    assert_eq!(weights, [3, 1, 0], "default 1, 0 drains");
    assert_eq!((n.gateways[1].protocol, n.gateways[1].backends.len()), (Nat46Protocol::Udp, 0));
    assert_eq!(ok(&toml::to_string(&c).unwrap()).nat46.unwrap(), n, "round trip");

    bad("[nat46]\nsource_prefix = \"2001:db8:46::/96\"\n", "nat46", "nat64.devices");
    bad(head.trim_end_matches("source_prefix = \"2001:db8:46::/96\"\n"), "nat46.source_prefix", "missing");
    bad(&head.replace("::/96", "::/64"), "nat46.source_prefix", "a /64");
    bad(&head.replace("2001:db8:46::/96", "64:ff9b::/96"), "nat46.source_prefix", "overlaps nat64.prefix");
    let gw = |body: &str| with(&format!("[[nat46.gateway]]\n{body}\n"));
    bad(&gw("frontend = \"198.51.100.80\""), "nat46.gateway[0].frontend", "not an IPv4 address and port");
    bad(&gw("frontend = \"198.51.100.80:0\""), "nat46.gateway[0].frontend", "not an IPv4 address and port");
    bad(&gw("backends = []"), "nat46.gateway[0].frontend", "missing");
    bad(&gw("frontend = \"198.51.100.80:80\"\nprotocol = \"sctp\""), "nat46.gateway[0].protocol", "tcp, udp");
    bad(
        &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"2001:db8::a\" }]"),
        "nat46.gateway[0].backends[0].address",
        "not an IPv6 address and port",
    );
    bad(
        &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[::ffff:192.0.2.1]:80\" }]"),
        "nat46.gateway[0].backends[0].address",
        "cannot be a backend",
    );
    bad(
        &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8:46::1]:80\" }]"),
        "nat46.gateway[0].backends[0].address",
        "cannot be a backend",
    );
    bad(
        &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::a]:80\", weight = 1001 }]"),
        "nat46.gateway[0].backends[0].weight",
        "0..=1000",
    );
    bad(
        &gw("frontend = \"198.51.100.80:80\"\nbackends = [{ address = \"[2001:db8::a]:80\" }, { address = \"[2001:db8::a]:80\" }]"),
        "nat46.gateway[0].backends[1].address",
        "backend 0 already",
    );
    bad(
        &with("[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n"),
        "nat46.gateway[1].frontend",
        "gateway[0]'s already",
    );
    bad(
        "[nat64]\ndevices = [\"eth0\"]\n[nat64.stateful]\npool = [\"198.51.100.80\"]\nsources = [\"fd00::/8\"]\n\
         [nat46]\nsource_prefix = \"2001:db8:46::/96\"\n[[nat46.gateway]]\nfrontend = \"198.51.100.80:80\"\n",
        "nat46.gateway[0].frontend",
        "nat64.stateful.pool",
    );
    bad(&with("udp_seconds = 0\n"), "nat46.udp_seconds", "out of range");
    bad(&gw("frontend = \"198.51.100.80:80\"\nweight = 2"), "nat46.gateway[0].weight", "unknown key");
}
