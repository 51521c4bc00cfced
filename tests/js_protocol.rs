//! The JS face's numbers are declared once, in `src/js/protocol.rs`; `src/js/protocol.js`
//! declares the ones the JS files use, in its block marked `protocol (src/js/protocol.rs)`. These
//! tests read that block and the JS files (`src/js/*.js`) and hold them to the table: each name
//! with the table's value, none declared and unused, none of the table's used and undeclared,
//! each imported by the file that uses it, and no number of the protocol written out bare where
//! a name exists for it. They also check that `src/js/api.rs` names every JS file, which is what
//! has wasm-bindgen ship it.

use std::fs;
use std::path::Path;

#[path = "../src/js/protocol.rs"]
mod protocol;

const PROTOCOL_JS: &str = include_str!("../src/js/protocol.js");
const BEGIN: &str = "// --- protocol (src/js/protocol.rs) ---";
const END: &str = "// --- end protocol ---";

/// `export const NAME = value;` lines of the block, in order.
fn js_constants(source: &str) -> Vec<(String, f64)> {
    let start = source
        .find(BEGIN)
        .expect("protocol.js has the protocol block");
    let end = source[start..].find(END).expect("the protocol block ends") + start;
    source[start..end]
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("export const ")?;
            let (name, value) = rest.split_once(" = ")?;
            let value = value.split(';').next()?.trim();
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("{name} = {value} is not a number literal"));
            Some((name.to_owned(), value))
        })
        .collect()
}

/// The JS files of the JS face but protocol.js, by name, as they are.
fn js_files() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/js");
    let mut files: Vec<_> = fs::read_dir(&dir)
        .expect("src/js")
        .map(|entry| entry.expect("a file of src/js").path())
        .filter(|path| path.extension().is_some_and(|e| e == "js"))
        .filter(|path| path.file_name().is_some_and(|n| n != "protocol.js"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&path).expect("a JS file"))
        })
        .collect();
    files.sort();
    assert!(files.len() >= 10, "only {} JS files in src/js", files.len());
    files
}

/// A file without its comments and imports: the code that uses the names.
fn code(source: &str) -> String {
    source
        .lines()
        .filter(|line| !line.starts_with("import "))
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|line| !line.trim_start().starts_with('*') && !line.trim_start().starts_with("/*"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names a file imports from protocol.js.
fn imported(source: &str) -> Vec<String> {
    source
        .lines()
        .filter(|line| line.starts_with("import {") && line.ends_with("from \"./protocol.js\";"))
        .flat_map(|line| {
            let names = &line["import {".len()..line.find('}').unwrap()];
            names
                .split(',')
                .map(|n| n.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether `code` has `name` as a whole word.
fn uses(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let before = code[..at].chars().next_back().is_none_or(|c| !word(c));
        let after = code[at + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !word(c));
        before && after
    })
}

fn mismatches(js: &[(String, f64)], code: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, value) in js {
        match protocol::TABLE.iter().find(|(n, _)| n == name) {
            None => problems.push(format!("{name} in protocol.js is not in protocol.rs")),
            Some((_, v)) if v != value => problems.push(format!(
                "{name} is {value} in protocol.js, {v} in protocol.rs"
            )),
            Some(_) => {}
        }
        if js.iter().filter(|(n, _)| n == name).count() > 1 {
            problems.push(format!("{name} is declared twice in protocol.js"));
        }
        if !uses(code, name) {
            problems.push(format!("{name} is declared in protocol.js but never used"));
        }
    }
    for (name, _) in protocol::TABLE {
        if uses(code, name) && !js.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name} is used in the JS files but not declared"));
        }
    }
    problems
}

/// Every JS file's code, one after another.
fn all_code() -> String {
    js_files()
        .iter()
        .map(|(_, source)| code(source))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn protocol_js_declares_what_the_js_files_use_with_the_tables_values() {
    let js = js_constants(PROTOCOL_JS);
    assert!(js.len() >= 30, "only {} names in the block", js.len());
    let problems = mismatches(&js, &all_code());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn each_js_file_imports_the_protocol_names_it_uses() {
    let mut problems = Vec::new();
    for (file, source) in js_files() {
        let imports = imported(&source);
        for (name, _) in protocol::TABLE {
            if uses(&code(&source), name) && !imports.iter().any(|n| n == name) {
                problems.push(format!("{file} uses {name} without importing it"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_catches_a_changed_a_missing_an_extra_and_an_unused_number() {
    let js = js_constants(PROTOCOL_JS);
    let code = all_code();
    let mut changed = js.clone();
    changed.iter_mut().find(|(n, _)| n == "SPARED").unwrap().1 = 2.0;
    assert_eq!(
        mismatches(&changed, &code),
        ["SPARED is 2 in protocol.js, 4 in protocol.rs"]
    );
    let missing: Vec<_> = js
        .iter()
        .filter(|(n, _)| n != "STILL_QUEUED")
        .cloned()
        .collect();
    assert_eq!(
        mismatches(&missing, &code),
        ["STILL_QUEUED is used in the JS files but not declared"]
    );
    let mut extra = js.clone();
    extra.push(("SLOW".to_owned(), -5.0));
    assert_eq!(
        mismatches(&extra, &code),
        [
            "SLOW in protocol.js is not in protocol.rs",
            "SLOW is declared in protocol.js but never used"
        ]
    );
    let mut unused = js.clone();
    unused.push(("RELEASED".to_owned(), 1.0));
    assert_eq!(
        mismatches(&unused, &code),
        ["RELEASED is declared in protocol.js but never used"]
    );
}

#[test]
fn no_store_operation_or_answer_kind_is_written_bare_in_the_js_files() {
    // Calls whose numeric arguments are protocol numbers: each must pass a name.
    let body = all_code();
    let mut bare = Vec::new();
    let mut found = 0;
    for call in [
        "core.memoryCall(this, ",
        "core.memoryCall(store, ",
        "core.timeoutError(id, ",
        "core.acquireAnswered(id, ",
        "core.notHeldError(this.#key, ",
        "core.keyOperation(this.#key, this.#store.binding, ",
    ] {
        for (at, _) in body.match_indices(call) {
            found += 1;
            let arg = body[at + call.len()..]
                .split([',', ')'])
                .next()
                .unwrap()
                .trim();
            if arg
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit() || c == '-')
            {
                bare.push(format!("{call}{arg}"));
            }
        }
    }
    assert!(
        found >= 10,
        "only {found} calls found: have their names changed?"
    );
    assert!(bare.is_empty(), "bare protocol numbers: {bare:?}");
    // What a step carries is read by index name only.
    assert!(
        !body.contains("carried[0]")
            && !body.contains("carried[1]")
            && !body.contains("carried[2]"),
        "OUT read by a bare index"
    );
}

#[test]
fn api_rs_names_every_js_file() {
    // wasm-bindgen ships only the JS files Rust names: one left out is missing from the package.
    let snippets = include_str!("../src/js/api.rs");
    let mut missing: Vec<_> = js_files()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !snippets.contains(&format!("\"/src/js/{name}\"")))
        .collect();
    if !snippets.contains("\"/src/js/protocol.js\"") {
        missing.push("protocol.js".to_owned());
    }
    assert!(
        missing.is_empty(),
        "not named in src/js/api.rs: {missing:?}"
    );
}
