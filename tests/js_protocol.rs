//! The JS face's numbers are declared once, in `src/js/protocol.rs`; `src/js/api.js` declares
//! the ones it uses in its block marked `protocol (src/js/protocol.rs)`. These tests read that
//! block and hold it to the table: each name with the table's value, none declared and unused,
//! none of the table's used and undeclared, and no number of the protocol written out bare
//! where a name exists for it.

#[path = "../src/js/protocol.rs"]
mod protocol;

const API_JS: &str = include_str!("../src/js/api.js");
const BEGIN: &str = "// --- protocol (src/js/protocol.rs) ---";
const END: &str = "// --- end protocol ---";

/// `const NAME = value;` lines of the block, in order.
fn js_constants(source: &str) -> Vec<(String, f64)> {
    let start = source.find(BEGIN).expect("api.js has the protocol block");
    let end = source[start..].find(END).expect("the protocol block ends") + start;
    source[start..end]
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("const ")?;
            let (name, value) = rest.split_once(" = ")?;
            let value = value.split(';').next()?.trim();
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("{name} = {value} is not a number literal"));
            Some((name.to_owned(), value))
        })
        .collect()
}

/// api.js outside the block, without its comments: the code that uses the names.
fn code(source: &str) -> String {
    let end = source.find(END).expect("the protocol block ends");
    source[end + END.len()..]
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|line| !line.trim_start().starts_with('*') && !line.trim_start().starts_with("/*"))
        .collect::<Vec<_>>()
        .join("\n")
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
            None => problems.push(format!("{name} in api.js is not in protocol.rs")),
            Some((_, v)) if v != value => {
                problems.push(format!("{name} is {value} in api.js, {v} in protocol.rs"))
            }
            Some(_) => {}
        }
        if js.iter().filter(|(n, _)| n == name).count() > 1 {
            problems.push(format!("{name} is declared twice in api.js"));
        }
        if !uses(code, name) {
            problems.push(format!("{name} is declared in api.js but never used"));
        }
    }
    for (name, _) in protocol::TABLE {
        if uses(code, name) && !js.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name} is used in api.js but not declared"));
        }
    }
    problems
}

#[test]
fn api_js_declares_what_it_uses_with_the_tables_values() {
    let js = js_constants(API_JS);
    assert!(js.len() >= 30, "only {} names in the block", js.len());
    let problems = mismatches(&js, &code(API_JS));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_catches_a_changed_a_missing_an_extra_and_an_unused_number() {
    let js = js_constants(API_JS);
    let code = code(API_JS);
    let mut changed = js.clone();
    changed.iter_mut().find(|(n, _)| n == "SPARED").unwrap().1 = 2.0;
    assert_eq!(
        mismatches(&changed, &code),
        ["SPARED is 2 in api.js, 4 in protocol.rs"]
    );
    let missing: Vec<_> = js
        .iter()
        .filter(|(n, _)| n != "STILL_QUEUED")
        .cloned()
        .collect();
    assert_eq!(
        mismatches(&missing, &code),
        ["STILL_QUEUED is used in api.js but not declared"]
    );
    let mut extra = js.clone();
    extra.push(("SLOW".to_owned(), -5.0));
    assert_eq!(
        mismatches(&extra, &code),
        [
            "SLOW in api.js is not in protocol.rs",
            "SLOW is declared in api.js but never used"
        ]
    );
    let mut unused = js.clone();
    unused.push(("RELEASED".to_owned(), 1.0));
    assert_eq!(
        mismatches(&unused, &code),
        ["RELEASED is declared in api.js but never used"]
    );
}

#[test]
fn no_store_operation_or_answer_kind_is_written_bare_in_api_js() {
    // Calls whose numeric arguments are protocol numbers: each must pass a name.
    let body = &API_JS[API_JS.find(END).unwrap()..];
    let mut bare = Vec::new();
    for call in [
        "memoryCall(this, ",
        "memoryCall(store, ",
        "__kTimeoutError(id, ",
        "__kAnswered(id, ",
        "__kNotHeld(this.#key, ",
        "__kInspect(this.#key, this.#store.binding, ",
    ] {
        for (at, _) in body.match_indices(call) {
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
    assert!(bare.is_empty(), "bare protocol numbers: {bare:?}");
    // The OUT array is read by index name only.
    assert!(
        !body.contains("out[0]") && !body.contains("out[1]") && !body.contains("out[2]"),
        "OUT read by a bare index"
    );
}
