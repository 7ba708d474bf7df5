// SPDX-License-Identifier: Apache-2.0
//! Loading the file stack and merging it: which files are read, in which
//! order, which one each key comes from, and errors about whole files.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::testutil::{assert_err, strs, Tree, NAME};
use crate::{load_with_extra, parse_str, AttachMode, Config, LogLevel};

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
