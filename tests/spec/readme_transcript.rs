//! The redis-cli examples under "## Commands" in README.md are a transcript: this test
//! replays every `127.0.0.1:6379> …` line with the real `redis-cli` against a fresh
//! server, in order, and checks each reply line.
//!
//! Values that legitimately differ from run to run are matched by shape, not by text:
//! - a fence (an integer of 16 digits or more, microseconds on the fence clock) matches
//!   any integer; the same README fence must be the same actual fence each time it
//!   appears, and README fences in increasing order must be increasing actual fences;
//! - a generated token (32 hex characters in quotes) matches any 32 hex characters,
//!   bound the same way, and is substituted where a later command uses it;
//! - a remaining lease (the value after `ttl-ms`, or a `PTTL` reply) matches any integer
//!   from 1 up to the ttl the key was last acquired or refreshed with.
//!
//! Everything else must match exactly. `FENCELOCK_REDIS_CLI` picks the client binary.

use std::collections::HashMap;
use std::process::Command;

use testkit::Server;

/// One command of the transcript and the reply lines printed under it.
#[derive(Debug)]
struct Step {
    line: String,
    args: Vec<String>,
    expected: Vec<String>,
}

const PROMPT: &str = "127.0.0.1:6379> ";
/// Fence-clock values are microseconds since 1970: 16 digits for centuries to come.
const FENCE_DIGITS: usize = 16;

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    std::fs::read_to_string(path).expect("read README.md")
}

/// The code blocks of the "## Commands" section, as steps.
fn transcript(readme: &str) -> Vec<Step> {
    let section = readme
        .split_once("\n## Commands\n")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
        .expect("README has a '## Commands' section");
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some(command) = line.strip_prefix(PROMPT) {
            steps.push(Step {
                line: line.to_string(),
                args: split_args(command),
                expected: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.expected.push(line.to_string());
        }
    }
    steps
}

/// Splits like redis-cli's prompt does, for the quoting the README uses.
fn split_args(command: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut rest = command.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').expect("closing quote");
            args.push(quoted[..end].to_string());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            args.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    args
}

/// What the README printed, bound to what the server printed.
#[derive(Default)]
struct Bindings {
    fences: Vec<(i64, i64)>,
    tokens: HashMap<String, String>,
    /// Key → the ttl it was last given, for remaining-lease values.
    leases: HashMap<String, i64>,
}

impl Bindings {
    fn bind_fence(&mut self, readme: i64, actual: i64, at: &str) {
        assert!(actual > 0, "{at}: fence {actual} is not positive");
        for (seen_readme, seen_actual) in &self.fences {
            assert_eq!(
                readme.cmp(seen_readme),
                actual.cmp(seen_actual),
                "{at}: README fences {seen_readme} → {readme} but the server gave \
                 {seen_actual} → {actual}"
            );
        }
        self.fences.push((readme, actual));
    }

    fn bind_token(&mut self, readme: &str, actual: &str, at: &str) {
        assert!(
            is_generated_token(actual),
            "{at}: {actual:?} is not a token"
        );
        let bound = self
            .tokens
            .entry(readme.to_string())
            .or_insert_with(|| actual.to_string());
        assert_eq!(bound, actual, "{at}: the same README token, another token");
        assert_eq!(
            self.tokens.values().filter(|t| *t == actual).count(),
            1,
            "{at}: two README tokens, one actual token"
        );
    }

    /// README tokens in a command become the server's.
    fn substitute(&self, args: &[String]) -> Vec<String> {
        args.iter()
            .map(|arg| self.tokens.get(arg).unwrap_or(arg).clone())
            .collect()
    }

    fn note_lease(&mut self, args: &[String]) {
        let name = args[0].to_ascii_uppercase();
        let ttl_at = match name.as_str() {
            "LOCK.ACQUIRE" => 2,
            "LOCK.REFRESH" => 3,
            _ => return,
        };
        if let Some(ttl) = args.get(ttl_at).and_then(|t| t.parse().ok()) {
            self.leases.insert(args[1].clone(), ttl);
        }
    }
}

fn is_generated_token(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `N) ` prefixes of array elements, then the value.
fn split_index(line: &str) -> (&str, &str) {
    let trimmed = line.trim_start();
    let value_at = trimmed
        .find(") ")
        .filter(|end| trimmed[..*end].bytes().all(|b| b.is_ascii_digit()) && *end > 0)
        .map_or(0, |end| end + 2);
    let value_at = value_at + (line.len() - trimmed.len());
    line.split_at(value_at)
}

fn integer(value: &str) -> Option<&str> {
    value
        .strip_prefix("(integer) ")
        .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()) && !digits.is_empty())
}

fn quoted(value: &str) -> Option<&str> {
    value.strip_prefix('"')?.strip_suffix('"')
}

/// Checks one reply line; `previous` is the README line before it.
fn check_line(
    bindings: &mut Bindings,
    step: &Step,
    expected: &str,
    actual: &str,
    previous: Option<&str>,
) {
    let at = format!("{} → {expected:?}", step.line);
    let (expected_index, expected_value) = split_index(expected);
    let (actual_index, actual_value) = split_index(actual);
    assert_eq!(expected_index, actual_index, "{at}: got {actual:?}");
    let after_ttl_field = previous.is_some_and(|p| split_index(p).1 == "ttl-ms");
    let is_pttl = step.args[0].eq_ignore_ascii_case("PTTL");
    if let (Some(readme), Some(server)) = (integer(expected_value), integer(actual_value)) {
        let server: i64 = server.parse().expect("integer");
        if after_ttl_field || is_pttl {
            let lease = bindings.leases.get(&step.args[1]).copied().unwrap_or(0);
            assert!(
                server > 0 && server <= lease,
                "{at}: remaining lease {server} not within 1..={lease}"
            );
            return;
        }
        if readme.len() >= FENCE_DIGITS {
            bindings.bind_fence(readme.parse().expect("fence"), server, &at);
            return;
        }
    }
    if let (Some(readme), Some(server)) = (quoted(expected_value), quoted(actual_value)) {
        if is_generated_token(readme) {
            bindings.bind_token(readme, server, &at);
            return;
        }
    }
    assert_eq!(expected_value, actual_value, "{at}");
}

fn redis_cli(port: u16, args: &[String]) -> Vec<String> {
    let cli = std::env::var("FENCELOCK_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
    let output = Command::new(cli)
        .arg("-p")
        .arg(port.to_string())
        .arg("--no-raw")
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(output.status.success(), "redis-cli {args:?} failed");
    String::from_utf8(output.stdout)
        .expect("utf-8 reply")
        .lines()
        .map(|line| line.trim_end().to_string())
        .collect()
}

#[test]
fn the_readme_command_examples_replay_as_written() {
    let steps = transcript(&readme());
    assert!(
        steps.len() >= 10,
        "expected the README's command examples, found {} steps",
        steps.len()
    );
    let server = Server::start();
    let mut bindings = Bindings::default();
    for step in &steps {
        assert!(!step.expected.is_empty(), "{}: no reply shown", step.line);
        let args = bindings.substitute(&step.args);
        let actual = redis_cli(server.port, &args);
        assert_eq!(
            actual.len(),
            step.expected.len(),
            "{}: replied {actual:?}",
            step.line
        );
        for (index, (expected, actual)) in step.expected.iter().zip(&actual).enumerate() {
            let previous = index.checked_sub(1).map(|i| step.expected[i].as_str());
            check_line(&mut bindings, step, expected, actual, previous);
        }
        bindings.note_lease(&args);
    }
    assert!(!bindings.fences.is_empty() && !bindings.tokens.is_empty());
}

#[test]
fn shapes_reject_what_does_not_fit() {
    // The matcher itself must be able to fail: a fence order the server contradicts,
    // a token that is not 32 hex characters, a lease longer than the ttl.
    let step = Step {
        line: "LOCK.INFO k".into(),
        args: vec!["LOCK.INFO".into(), "k".into()],
        expected: Vec::new(),
    };
    let mut bindings = Bindings::default();
    check_line(
        &mut bindings,
        &step,
        "2) (integer) 1764412345678901",
        "2) (integer) 1800000000000005",
        None,
    );
    let later_but_lower = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut bindings = Bindings {
            fences: bindings.fences.clone(),
            ..Bindings::default()
        };
        check_line(
            &mut bindings,
            &step,
            "2) (integer) 1764412345690001",
            "2) (integer) 1800000000000001",
            None,
        );
    }));
    assert!(later_but_lower.is_err());
    let not_a_token = std::panic::catch_unwind(|| {
        Bindings::default().bind_token("9f1c2a0b7e3d4c5b8a69f0e1d2c3b4a5", "worker-1", "t")
    });
    assert!(not_a_token.is_err());
    let too_long = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut bindings = Bindings::default();
        bindings.leases.insert("k".into(), 10_000);
        check_line(
            &mut bindings,
            &step,
            "6) (integer) 9412",
            "6) (integer) 10001",
            Some("5) ttl-ms"),
        );
    }));
    assert!(too_long.is_err());
}
