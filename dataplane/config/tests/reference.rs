// SPDX-License-Identifier: Apache-2.0
//! docs/configuration.md against the config crate: every key the crate
//! accepts has a row there, every row names a key the crate accepts, and the
//! page's TOML examples load together as one valid configuration.
//!
//! The accepted keys come from the crate itself, never from a list kept
//! here: the test asks the validator. A table with an extra key
//! (`PROBE`) in it is refused with "unknown key `PROBE`; expected one of
//! a, b, c", which names every key that table accepts. Starting at the
//! root, each key so found is tried as a table, then as an array of
//! tables; what neither is, is a value. The page's examples are the rest
//! of the configuration around each probe, so that the validator gets as
//! far as the probed table (a `[[nat46.gateway]]` is only checked once
//! `nat64.devices` is set); keys there that the crate does not know are
//! left out of it, and the third test names them.
//!
//! On the page, a key is the first cell of a table row, in backticks and
//! dotted: `bigtcp.size`, with `[]` for the tables of an array:
//! `nat64.eam[].ipv6`. Every table (a section, or `[nat64.stateful]`) has a
//! heading naming it in backticks: "## `[nat64.stateful]`". Every ```toml
//! block is an example; they are loaded in page order as drop-ins.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// The key put into a table to make the validator list the keys it accepts.
const PROBE: &str = "v6node_reference_probe";

const PAGE: &str = "docs/configuration.md";

fn page_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(PAGE)
}

/// What the page says, with the line of each thing for messages.
struct Reference {
    /// Keys with a row -> the row's line.
    rows: BTreeMap<String, usize>,
    /// Tables with a heading -> the heading's line.
    headings: BTreeMap<String, usize>,
    /// Each ```toml block: its first line and its text.
    examples: Vec<(usize, String)>,
}

fn read_reference() -> Reference {
    let path = page_path();
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let mut reference = Reference { rows: BTreeMap::new(), headings: BTreeMap::new(), examples: Vec::new() };
    let mut example: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if let Some((_, body)) = example.as_mut() {
            if line.trim_start().starts_with("```") {
                reference.examples.push(example.take().expect("inside an example"));
            } else {
                body.push_str(line);
                body.push('\n');
            }
            continue;
        }
        if line.trim_start().starts_with("```toml") {
            example = Some((number + 1, String::new()));
        } else if line.starts_with('#') {
            if let Some(table) = line.split_once("`[").and_then(|(_, rest)| rest.split_once("]`")).map(|(name, _)| name) {
                if let Some(earlier) = reference.headings.insert(table.to_owned(), number) {
                    panic!("{PAGE}:{number}: a second heading for `[{table}]` (the first on line {earlier})");
                }
            }
        } else if let Some(key) = row_key(line) {
            if let Some(earlier) = reference.rows.insert(key.clone(), number) {
                panic!("{PAGE}:{number}: a second row for `{key}` (the first on line {earlier})");
            }
        }
    }
    assert!(example.is_none(), "{PAGE}: a ```toml block is not closed");
    assert!(!reference.rows.is_empty(), "{PAGE}: no key rows found (rows start with | `section.key` |)");
    reference
}

/// `| `bigtcp.size` | integer | ...` -> `bigtcp.size`.
fn row_key(line: &str) -> Option<String> {
    let cell = line.strip_prefix('|')?.split('|').next()?.trim();
    let key = cell.strip_prefix('`')?.strip_suffix('`')?;
    let is_key = key.contains('.')
        && key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.[]".contains(&b))
        && !key.starts_with('.');
    is_key.then(|| key.to_owned())
}

/// The examples merged as the crate merges drop-ins: tables key by key,
/// anything else replaced whole.
fn merged_examples(reference: &Reference) -> Table {
    let mut merged = Table::new();
    for (line, text) in &reference.examples {
        let table: Table = toml::from_str(text).unwrap_or_else(|e| panic!("{PAGE}:{line}: the example is not TOML: {e}"));
        merge(&mut merged, table);
    }
    merged
}

fn merge(dst: &mut Table, src: Table) {
    for (key, value) in src {
        match (dst.get_mut(&key), value) {
            (Some(Value::Table(old)), Value::Table(new)) => merge(old, new),
            (_, value) => {
                dst.insert(key, value);
            }
        }
    }
}

/// One step of a path into the configuration: a key, or the first table of
/// an array of tables.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Item,
}

/// As the page writes it: `nat46.gateway[].backends`.
fn page_name(path: &[Step]) -> String {
    let mut name = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !name.is_empty() {
                    name.push('.');
                }
                name.push_str(k);
            }
            Step::Item => name.push_str("[]"),
        }
    }
    name
}

/// As the crate's errors write it: `nat46.gateway[0].backends`.
fn error_name(path: &[Step]) -> String {
    page_name(path).replace("[]", "[0]")
}

/// What the crate accepts, found by probing.
#[derive(Default)]
struct Accepted {
    /// Values and arrays of tables, as the page names them.
    keys: BTreeSet<String>,
    /// Tables below the root: sections and `nat64.stateful`.
    tables: BTreeSet<String>,
    /// Probes that did not get an answer they could read.
    problems: Vec<String>,
}

enum Probe {
    /// The table at the path accepts these keys.
    Keys(Vec<String>),
    /// The crate refused what was put at the path (or, never so far,
    /// accepted it): not a table of that shape.
    Not,
    /// The crate stopped at something else first, or answered in a way this
    /// test cannot read.
    Blocked(String),
}

/// Loads `base` with the probe key put into the table at `path` (or, with
/// `as_array`, into the first table of the array at `path`), and reads
/// which keys the validator says that table accepts.
fn probe(base: &Table, path: &[Step], as_array: bool) -> Probe {
    let mut config = base.clone();
    let mut steps = path.to_vec();
    if as_array {
        steps.push(Step::Item);
    }
    put_probe(&mut config, &steps);
    let at = error_name(path);
    let expected_key = if steps.is_empty() { PROBE.to_owned() } else { format!("{}.{PROBE}", error_name(&steps)) };
    let e = match load(&config) {
        Ok(()) => return Probe::Not,
        Err(e) => e,
    };
    let key = e.key.clone().unwrap_or_default();
    if key == expected_key {
        // "unknown key `PROBE`; expected one of a, b, c"
        return match e.reason.split_once("expected one of ") {
            Some((_, list)) if e.reason.contains(PROBE) => {
                Probe::Keys(list.split(", ").map(|k| k.trim_matches(['`', '"']).to_owned()).collect())
            }
            _ => Probe::Blocked(format!(
                "the crate's answer to an unknown key no longer lists the keys it expects \
                 (\"unknown key `{PROBE}`; expected one of a, b, c\"), which this test reads: {e}"
            )),
        };
    }
    let about_path = at.is_empty() || key == at || key.starts_with(&format!("{at}.")) || key.starts_with(&format!("{at}["));
    if about_path {
        Probe::Not
    } else {
        Probe::Blocked(e.to_string())
    }
}

fn load(config: &Table) -> Result<(), v6node_config::ConfigError> {
    let text = toml::to_string(config).expect("a TOML table serializes");
    v6node_config::parse_str(Path::new("<probe>"), &text).map(|_| ())
}

/// The examples without the keys the crate does not know, so that a wrong
/// key on the page is reported as such and does not stop every probe; an
/// error of any other kind is returned, for the examples to be mended first.
fn probe_base(examples: &Table) -> Result<Table, String> {
    let mut base = examples.clone();
    loop {
        let e = match load(&base) {
            Ok(()) => return Ok(base),
            Err(e) => e,
        };
        let unknown = e.reason.starts_with("unknown key");
        if !(unknown && e.key.as_deref().is_some_and(|key| remove(&mut base, key))) {
            return Err(format!("the examples are not a valid configuration, so the crate cannot be probed: {e}"));
        }
    }
}

/// Removes the value at a key as the crate's errors write it
/// (`nat64.eam[0].port`); false if there is none.
fn remove(table: &mut Table, key: &str) -> bool {
    let (parent, last) = match key.rsplit_once('.') {
        Some((parent, last)) => (Some(parent), last),
        None => (None, key),
    };
    let mut table = table;
    for part in parent.map(|p| p.split('.').collect::<Vec<_>>()).unwrap_or_default() {
        let (name, index) = match part.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        let next = match (table.get_mut(name), index) {
            (Some(Value::Table(t)), None) => t,
            (Some(Value::Array(items)), Some(i)) => match items.get_mut(i) {
                Some(Value::Table(t)) => t,
                _ => return false,
            },
            _ => return false,
        };
        table = next;
    }
    table.remove(last).is_some()
}

/// Puts `PROBE = 1` into the table `steps` lead to, an `Item` step being
/// the first table of the array the key before it names. Tables and arrays
/// `config` does not have are made on the way; a value in the way is
/// replaced.
fn put_probe(config: &mut Table, steps: &[Step]) {
    let mut table = config;
    let mut i = 0;
    while i < steps.len() {
        let Step::Key(key) = &steps[i] else { panic!("a path starts each step with a key: {steps:?}") };
        let into_item = matches!(steps.get(i + 1), Some(Step::Item));
        let slot = table.entry(key.clone()).or_insert_with(|| Value::Table(Table::new()));
        table = if into_item {
            i += 2;
            let has_table = matches!(slot, Value::Array(items) if matches!(items.first(), Some(Value::Table(_))));
            if !has_table {
                *slot = Value::Array(vec![Value::Table(Table::new())]);
            }
            let Value::Array(items) = slot else { unreachable!("made an array above") };
            items[0].as_table_mut().expect("checked or made a table above")
        } else {
            i += 1;
            if !slot.is_table() {
                *slot = Value::Table(Table::new());
            }
            slot.as_table_mut().expect("made a table above")
        };
    }
    table.insert(PROBE.to_owned(), Value::Integer(1));
}

/// Every key the crate accepts, found by probing from the root down, with
/// the examples as the configuration around each probe.
fn accepted(examples: &Table) -> Accepted {
    let mut accepted = Accepted::default();
    let base = match probe_base(examples) {
        Ok(base) => base,
        Err(why) => {
            accepted.problems.push(why);
            return accepted;
        }
    };
    match probe(&base, &[], false) {
        Probe::Keys(sections) => {
            for section in sections {
                walk(&base, vec![Step::Key(section)], &mut accepted);
            }
        }
        Probe::Not => accepted.problems.push("the root table did not answer a probe".into()),
        Probe::Blocked(why) => accepted.problems.push(format!("probing the root table: {why}")),
    }
    accepted
}

fn walk(base: &Table, path: Vec<Step>, accepted: &mut Accepted) {
    let name = page_name(&path);
    let array = match probe(base, &path, false) {
        Probe::Keys(keys) => {
            accepted.tables.insert(name);
            for key in keys {
                let mut child = path.clone();
                child.push(Step::Key(key));
                walk(base, child, accepted);
            }
            return;
        }
        Probe::Blocked(why) => {
            accepted.problems.push(format!("probing `{name}`: {why}"));
            return;
        }
        Probe::Not => probe(base, &path, true),
    };
    accepted.keys.insert(name.clone());
    match array {
        Probe::Keys(keys) => {
            for key in keys {
                let mut child = path.clone();
                child.push(Step::Item);
                child.push(Step::Key(key));
                walk(base, child, accepted);
            }
        }
        Probe::Blocked(why) => accepted.problems.push(format!("probing `{name}`: {why}")),
        Probe::Not => {}
    }
}

/// Every key the examples set, as the page names them.
fn example_keys(table: &Table, prefix: &str, out: &mut BTreeSet<String>) {
    for (key, value) in table {
        let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match value {
            Value::Table(t) => example_keys(t, &name, out),
            Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_table) => {
                out.insert(name.clone());
                for item in items {
                    example_keys(item.as_table().expect("checked above"), &format!("{name}[]"), out);
                }
            }
            _ => {
                out.insert(name);
            }
        }
    }
}

fn fail_with(problems: &[String], what: &str) {
    assert!(problems.is_empty(), "{PAGE} and the config crate disagree ({what}):\n  {}\n", problems.join("\n  "));
}

#[test]
fn every_key_the_crate_accepts_has_a_row() {
    let reference = read_reference();
    let accepted = accepted(&merged_examples(&reference));
    // Without a complete probe every key would look missing: say why first.
    fail_with(&accepted.problems, "the crate could not be probed");
    let mut problems = Vec::new();
    for key in &accepted.keys {
        if !reference.rows.contains_key(key) {
            problems.push(format!("`{key}` is accepted by the config crate but has no row in {PAGE}"));
        }
    }
    for table in &accepted.tables {
        if table.contains('.') && !reference.headings.contains_key(table) {
            problems.push(format!("the table `[{table}]` is accepted by the config crate but has no heading in {PAGE}"));
        }
    }
    fail_with(&problems, "keys without a row");
}

#[test]
fn every_row_names_a_key_the_crate_accepts() {
    let reference = read_reference();
    let accepted = accepted(&merged_examples(&reference));
    fail_with(&accepted.problems, "the crate could not be probed");
    let mut problems = Vec::new();
    for (key, line) in &reference.rows {
        if !accepted.keys.contains(key) {
            let why = if accepted.tables.contains(key) { "a table, not a key: give it a heading" } else { "no such key" };
            problems.push(format!("`{key}` ({PAGE}:{line}) is not a key the config crate accepts: {why}"));
        }
    }
    for (table, line) in &reference.headings {
        if !accepted.tables.contains(table) {
            problems.push(format!("the heading `[{table}]` ({PAGE}:{line}) names no table the config crate accepts"));
        }
    }
    fail_with(&problems, "rows for keys the crate does not have");
}

#[test]
fn the_examples_load_as_one_configuration_and_set_every_key() {
    let reference = read_reference();
    assert!(!reference.examples.is_empty(), "{PAGE}: no ```toml examples");
    // As the agent would read them: drop-ins in page order, named by line.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let files: Vec<PathBuf> = reference
        .examples
        .iter()
        .enumerate()
        .map(|(i, (line, text))| {
            let file = dir.path().join(format!("{i:02}-{PAGE}:{line}.toml").replace('/', "_"));
            fs::write(&file, text).expect("writing an example");
            file
        })
        .collect();
    let empty_root = dir.path().join("root");
    if let Err(e) = v6node_config::load_with_extra(&empty_root, &files) {
        panic!("{PAGE}'s examples do not load as one configuration: {e}");
    }

    let mut set = BTreeSet::new();
    example_keys(&merged_examples(&reference), "", &mut set);
    let mut problems = Vec::new();
    for (key, line) in &reference.rows {
        if !set.contains(key) {
            problems.push(format!("`{key}` ({PAGE}:{line}) is set by no example"));
        }
    }
    for key in &set {
        if !reference.rows.contains_key(key) {
            problems.push(format!("`{key}` is set by an example but has no row in {PAGE}"));
        }
    }
    fail_with(&problems, "examples and rows");
}
