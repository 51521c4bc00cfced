//! The JS face's numbers are declared once, in `src/js/protocol.rs`; `src/js/api.js` keeps a
//! copy in its block marked `protocol (src/js/protocol.rs)`. These tests read that block and
//! hold it to the table: the same names, each with the same value, and no number of the
//! protocol written out bare where a name exists for it.

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

fn mismatches(js: &[(String, f64)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, value) in protocol::TABLE {
        match js.iter().find(|(n, _)| n == name) {
            None => problems.push(format!("{name} is missing from api.js")),
            Some((_, v)) if v != value => {
                problems.push(format!("{name} is {v} in api.js, {value} in protocol.rs"))
            }
            Some(_) => {}
        }
    }
    for (name, _) in js {
        if !protocol::TABLE.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name} in api.js is not in protocol.rs"));
        }
        if js.iter().filter(|(n, _)| n == name).count() > 1 {
            problems.push(format!("{name} is declared twice in api.js"));
        }
    }
    problems
}

#[test]
fn api_js_declares_every_number_of_the_table_with_its_value() {
    let js = js_constants(API_JS);
    assert!(js.len() >= protocol::TABLE.len());
    let problems = mismatches(&js);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_catches_a_changed_a_missing_and_an_extra_number() {
    let js = js_constants(API_JS);
    let mut changed = js.clone();
    changed.iter_mut().find(|(n, _)| n == "SPARED").unwrap().1 = 2.0;
    assert_eq!(
        mismatches(&changed),
        ["SPARED is 2 in api.js, 4 in protocol.rs"]
    );
    let missing: Vec<_> = js.iter().filter(|(n, _)| n != "QUEUE").cloned().collect();
    assert_eq!(mismatches(&missing), ["QUEUE is missing from api.js"]);
    let mut extra = js.clone();
    extra.push(("SLOW".to_owned(), -5.0));
    assert_eq!(mismatches(&extra), ["SLOW in api.js is not in protocol.rs"]);
}

#[test]
fn no_store_operation_or_answer_kind_is_written_bare_in_api_js() {
    // Calls whose numeric arguments are protocol numbers: each must pass a name.
    let body = &API_JS[API_JS.find(END).unwrap()..];
    let mut bare = Vec::new();
    for call in [
        "__kMemoryCall(this, ",
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
