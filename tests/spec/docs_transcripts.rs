//! Every redis-cli transcript in the project's markdown is replayed: a code block with
//! lines that start with the prompt `127.0.0.1:6379> ` is a transcript block, and all
//! transcript blocks of one markdown file, wherever they stand in it, are replayed in
//! order against one fresh server, so state carries from block to block. Each
//! `127.0.0.1:6379> …` line is run with the real `redis-cli` (one process per line, so
//! connection state such as `MULTI` or `SELECT` does not carry), and every line under
//! it up to the next prompt or the end of its block must be the reply. Lines of a
//! block before its first prompt (say the shell command that opened redis-cli) are not
//! replayed.
//!
//! README.md and the command reference, docs/commands.md, each have a test of their own
//! that also requires a minimum of steps; every other markdown file in the repository
//! (the walk of `docs_links`) that has transcript blocks is replayed by a third test.
//! A failure names the file and line of the command.
//!
//! Values that legitimately differ from run to run are matched by shape, not by text:
//! - a fence (an integer of 16 digits or more, microseconds on the fence clock) matches
//!   any integer; the same documented fence must be the same actual fence each time it
//!   appears, and documented fences in increasing order must be increasing actual
//!   fences;
//! - a generated token (32 hex characters in quotes) matches any 32 hex characters,
//!   bound the same way; bound tokens and fences are substituted where a later command
//!   uses them, and bound fences also inside later reply text (an error naming one);
//! - a remaining lease (the value after `ttl-ms`, or a `PTTL` reply) matches any integer
//!   from 1 up to the ttl the key was last acquired (`LOCK.ACQUIRE`, or any of the keys
//!   of a `LOCK.ACQUIREALL`) or refreshed with;
//! - a time waited or held (the third and fourth values of a `LOCK.TOP` entry, in ms)
//!   matches any integer up to a minute, longer than any transcript takes.
//!
//! A value is what follows its array prefixes, one `N) ` per level (`2) 1) ` is the first
//! element of an array inside an array, as `LOCK.ACQUIREALL` replies its fences), and
//! the prefixes must match exactly. Everything else must match exactly. `FENCELOCK_REDIS_CLI` picks the client binary.

use std::collections::HashMap;
use std::process::Command;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use testkit::Server;

use crate::docs_links::{github_options, line_at, repo_markdown_files, repo_root};

/// One command of a transcript and the reply lines printed under it.
#[derive(Debug)]
struct Step {
    /// `file:line` of the command, for messages.
    at: String,
    line: String,
    args: Vec<String>,
    expected: Vec<String>,
}

const PROMPT: &str = "127.0.0.1:6379> ";
/// The longest time waited or held a `LOCK.TOP` of a transcript may show, in ms.
const MAX_TOP_AGE_MS: i64 = 60_000;
/// Fence-clock values are microseconds since 1970: 16 digits for centuries to come.
const FENCE_DIGITS: usize = 16;

const README: &str = "README.md";
const COMMAND_REFERENCE: &str = "docs/commands.md";

/// A code block's lines and the line number of the first one in its file.
struct CodeBlock {
    first_line: usize,
    lines: Vec<String>,
}

/// Every code block of a markdown file, fenced or indented, in order. A parser finds
/// them, so a fence inside a list or a quote counts and a prompt in running text does
/// not.
fn code_blocks(markdown: &str) -> Vec<CodeBlock> {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (event, range) in Parser::new_ext(markdown, github_options()).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let starts_at = line_at(markdown, range.start);
                let first_line = match kind {
                    CodeBlockKind::Fenced(_) => starts_at + 1,
                    CodeBlockKind::Indented => starts_at,
                };
                current = Some((first_line, String::new()));
            }
            Event::Text(text) => {
                if let Some((_, content)) = current.as_mut() {
                    content.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => {
                if let Some((first_line, content)) = current.take() {
                    blocks.push(CodeBlock {
                        first_line,
                        lines: content.lines().map(str::to_string).collect(),
                    });
                }
            }
            _ => {}
        }
    }
    blocks
}

/// The steps of every transcript block of `markdown`, in order; `file` names it in
/// messages.
fn transcript(file: &str, markdown: &str) -> Vec<Step> {
    code_blocks(markdown)
        .iter()
        .flat_map(|block| block_steps(file, block))
        .collect()
}

/// A block's steps: each prompt line starts one, the lines after it are its reply.
fn block_steps(file: &str, block: &CodeBlock) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for (index, line) in block.lines.iter().enumerate() {
        if let Some(command) = line.strip_prefix(PROMPT) {
            steps.push(Step {
                at: format!("{file}:{}", block.first_line + index),
                line: line.clone(),
                args: split_args(command),
                expected: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut() {
            step.expected.push(line.clone());
        }
    }
    steps
}

/// Splits like redis-cli's prompt does, for the quoting the docs use.
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

/// What the docs printed, bound to what the server printed.
#[derive(Debug, Default)]
struct Bindings {
    fences: Vec<(i64, i64)>,
    tokens: HashMap<String, String>,
    /// Key → the ttl it was last given, for remaining-lease values.
    leases: HashMap<String, i64>,
}

impl Bindings {
    fn bind_fence(&mut self, documented: i64, actual: i64, at: &str) {
        assert!(actual > 0, "{at}: fence {actual} is not positive");
        for (seen_documented, seen_actual) in &self.fences {
            assert_eq!(
                documented.cmp(seen_documented),
                actual.cmp(seen_actual),
                "{at}: documented fences {seen_documented} → {documented} but the server \
                 gave {seen_actual} → {actual}"
            );
        }
        self.fences.push((documented, actual));
    }

    fn bind_token(&mut self, documented: &str, actual: &str, at: &str) {
        assert!(
            is_generated_token(actual),
            "{at}: {actual:?} is not a token"
        );
        let bound = self
            .tokens
            .entry(documented.to_string())
            .or_insert_with(|| actual.to_string());
        assert_eq!(
            bound, actual,
            "{at}: the same documented token, another token"
        );
        assert_eq!(
            self.tokens.values().filter(|t| *t == actual).count(),
            1,
            "{at}: two documented tokens, one actual token"
        );
    }

    /// Documented tokens and fences in a command become the server's, so that a
    /// transcript can hand a grant's fence on (`LOCK.FENCED mark <fence> …`).
    fn substitute(&self, args: &[String]) -> Vec<String> {
        args.iter()
            .map(|arg| {
                let fence = self
                    .fences
                    .iter()
                    .find(|(documented, _)| documented.to_string() == *arg)
                    .map(|(_, actual)| actual.to_string());
                fence.unwrap_or_else(|| self.tokens.get(arg).unwrap_or(arg).clone())
            })
            .collect()
    }

    /// A documented reply with every bound fence spelt as the server's, for fences
    /// inside text (`STALE … (<fence>)`).
    fn with_actual_fences(&self, text: &str) -> String {
        self.fences
            .iter()
            .fold(text.to_string(), |text, (documented, actual)| {
                text.replace(&documented.to_string(), &actual.to_string())
            })
    }

    fn note_lease(&mut self, args: &[String]) {
        let name = args[0].to_ascii_uppercase();
        // The keys the command names, and where its ttl stands.
        let (keys, ttl_at) = match name.as_str() {
            "LOCK.ACQUIRE" => (1..2, 2),
            "LOCK.REFRESH" => (1..2, 3),
            "LOCK.ACQUIREALL" => {
                let Some(count) = args.get(1).and_then(|n| n.parse::<usize>().ok()) else {
                    return;
                };
                (2..2 + count, 2 + count)
            }
            _ => return,
        };
        let (Some(keys), Some(ttl)) = (
            args.get(keys),
            args.get(ttl_at).and_then(|t| t.parse().ok()),
        ) else {
            return;
        };
        for key in keys {
            self.leases.insert(key.clone(), ttl);
        }
    }
}

fn is_generated_token(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `N) ` prefixes of array elements (one per level of nesting: `2) 1) ` opens an array
/// inside an array), then the value.
fn split_index(line: &str) -> (&str, &str) {
    let mut value_at = line.len() - line.trim_start().len();
    while let Some(length) = element_prefix(&line[value_at..]) {
        value_at += length;
    }
    line.split_at(value_at)
}

/// The length of an `N) ` prefix at the start of `text`, if it has one.
fn element_prefix(text: &str) -> Option<usize> {
    let end = text.find(") ")?;
    let digits = &text[..end];
    (end > 0 && digits.bytes().all(|b| b.is_ascii_digit())).then_some(end + 2)
}

fn integer(value: &str) -> Option<&str> {
    value
        .strip_prefix("(integer) ")
        .filter(|digits| digits.bytes().all(|b| b.is_ascii_digit()) && !digits.is_empty())
}

fn quoted(value: &str) -> Option<&str> {
    value.strip_prefix('"')?.strip_suffix('"')
}

/// Checks one reply line; `previous` is the documented line before it.
fn check_line(
    bindings: &mut Bindings,
    step: &Step,
    expected: &str,
    actual: &str,
    previous: Option<&str>,
) {
    let at = format!("{}: {} → {expected:?}", step.at, step.line);
    let (expected_index, expected_value) = split_index(expected);
    let (actual_index, actual_value) = split_index(actual);
    assert_eq!(expected_index, actual_index, "{at}: got {actual:?}");
    let after_ttl_field = previous.is_some_and(|p| split_index(p).1 == "ttl-ms");
    let is_pttl = step.args[0].eq_ignore_ascii_case("PTTL");
    let is_top_age = step.args[0].eq_ignore_ascii_case("LOCK.TOP")
        && [" 3)", " 4)"]
            .iter()
            .any(|age| expected_index.trim_end().ends_with(age));
    if let (Some(documented), Some(server)) = (integer(expected_value), integer(actual_value)) {
        let server: i64 = server.parse().expect("integer");
        if is_top_age {
            assert!(
                (0..=MAX_TOP_AGE_MS).contains(&server),
                "{at}: a time waited or held of {server} ms"
            );
            return;
        }
        if after_ttl_field || is_pttl {
            let lease = bindings.leases.get(&step.args[1]).copied().unwrap_or(0);
            assert!(
                server > 0 && server <= lease,
                "{at}: remaining lease {server} not within 1..={lease}"
            );
            return;
        }
        if documented.len() >= FENCE_DIGITS {
            bindings.bind_fence(documented.parse().expect("fence"), server, &at);
            return;
        }
    }
    if let (Some(documented), Some(server)) = (quoted(expected_value), quoted(actual_value)) {
        if is_generated_token(documented) {
            bindings.bind_token(documented, server, &at);
            return;
        }
    }
    assert_eq!(
        bindings.with_actual_fences(expected_value),
        actual_value,
        "{at}"
    );
}

fn redis_cli(port: u16, args: &[String], at: &str) -> Vec<String> {
    let cli = std::env::var("FENCELOCK_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into());
    let output = Command::new(cli)
        .arg("-p")
        .arg(port.to_string())
        .arg("--no-raw")
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(output.status.success(), "{at}: redis-cli {args:?} failed");
    String::from_utf8(output.stdout)
        .expect("utf-8 reply")
        .lines()
        .map(|line| line.trim_end().to_string())
        .collect()
}

/// Replays the transcript of one markdown file on a fresh server; panics at the first
/// reply that does not fit, naming `file:line`.
fn replay(file: &str, markdown: &str, at_least: usize) -> Bindings {
    let steps = transcript(file, markdown);
    assert!(
        steps.len() >= at_least,
        "{file}: expected at least {at_least} redis-cli steps (`{PROMPT}…` lines in code \
         blocks), found {}",
        steps.len()
    );
    let server = Server::start();
    let mut bindings = Bindings::default();
    for step in &steps {
        assert!(!step.expected.is_empty(), "{}: no reply shown", step.at);
        let args = bindings.substitute(&step.args);
        let actual = redis_cli(server.port, &args, &step.at);
        assert_eq!(
            actual.len(),
            step.expected.len(),
            "{}: {}: replied {actual:?}",
            step.at,
            step.line
        );
        for (index, (expected, actual)) in step.expected.iter().zip(&actual).enumerate() {
            let previous = index.checked_sub(1).map(|i| step.expected[i].as_str());
            check_line(&mut bindings, step, expected, actual, previous);
        }
        bindings.note_lease(&args);
    }
    bindings
}

/// A markdown file of the repository, or a failure that says what belongs there.
fn read_markdown(file: &str, what: &str) -> String {
    std::fs::read_to_string(repo_root().join(file))
        .unwrap_or_else(|e| panic!("{file}: cannot read it ({e}); {what} belongs there"))
}

#[test]
fn the_readme_transcript_replays_as_written() {
    let readme = read_markdown(README, "the README's redis-cli transcript");
    replay(README, &readme, 3);
}

#[test]
fn the_command_reference_replays_as_written() {
    let reference = read_markdown(COMMAND_REFERENCE, "the command reference");
    let bindings = replay(COMMAND_REFERENCE, &reference, 10);
    // The reference shows fences and a generated token: the shapes must have been used.
    assert!(
        !bindings.fences.is_empty() && !bindings.tokens.is_empty(),
        "{COMMAND_REFERENCE}: its transcript shows no fence or no generated token"
    );
}

#[test]
fn every_other_transcript_replays_as_written() {
    for file in repo_markdown_files() {
        if file == README || file == COMMAND_REFERENCE {
            continue;
        }
        let markdown = read_markdown(&file, "a markdown file");
        if !transcript(&file, &markdown).is_empty() {
            replay(&file, &markdown, 1);
        }
    }
}

#[test]
fn transcript_blocks_are_found_anywhere_with_their_lines() {
    let markdown = "# Title\n\
        \n\
        Inline `127.0.0.1:6379> PING` is prose, not a step.\n\
        \n\
        ```sh\n\
        $ redis-cli\n\
        127.0.0.1:6379> PING\n\
        PONG\n\
        ```\n\
        \n\
        ```python\n\
        print('no transcript here')\n\
        ```\n\
        \n\
        - in a list:\n\
        \n\
        \x20 ~~~\n\
        \x20 127.0.0.1:6379> SET \"a key\" 1\n\
        \x20 OK\n\
        \x20 127.0.0.1:6379> GET \"a key\"\n\
        \x20 \"1\"\n\
        \x20 ~~~\n";
    let steps = transcript("doc.md", markdown);
    let found: Vec<_> = steps
        .iter()
        .map(|s| (s.at.as_str(), s.args.clone(), s.expected.clone()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "doc.md:7",
                vec!["PING".to_string()],
                vec!["PONG".to_string()]
            ),
            (
                "doc.md:18",
                vec!["SET".into(), "a key".into(), "1".into()],
                vec!["OK".into()]
            ),
            (
                "doc.md:20",
                vec!["GET".into(), "a key".into()],
                vec!["\"1\"".into()]
            ),
        ]
    );
}

#[test]
fn a_wrong_reply_fails_naming_the_file_and_line() {
    let markdown = "# Notes\n\
        \n\
        ```\n\
        127.0.0.1:6379> ECHO hello\n\
        \"hello\"\n\
        ```\n\
        \n\
        ```\n\
        127.0.0.1:6379> ECHO hello\n\
        \"goodbye\"\n\
        ```\n";
    let failure = std::panic::catch_unwind(|| replay("docs/notes.md", markdown, 1))
        .expect_err("a wrong reply must fail");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("docs/notes.md:9: "), "{message}");
}

#[test]
fn shapes_reject_what_does_not_fit() {
    // The matcher itself must be able to fail: a fence order the server contradicts,
    // a token that is not 32 hex characters, a lease longer than the ttl.
    let step = Step {
        at: "doc.md:1".into(),
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
    let top = Step {
        at: "doc.md:1".into(),
        line: "LOCK.TOP".into(),
        args: vec!["LOCK.TOP".into()],
        expected: Vec::new(),
    };
    check_line(
        &mut Bindings::default(),
        &top,
        "   4) (integer) 9",
        "   4) (integer) 17",
        None,
    );
    let waiters_differ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_line(
            &mut Bindings::default(),
            &top,
            "   2) (integer) 5",
            "   2) (integer) 4",
            None,
        );
    }));
    assert!(waiters_differ.is_err(), "only the ages go by shape");
    let older_than_a_transcript = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_line(
            &mut Bindings::default(),
            &top,
            "   3) (integer) 9",
            "   3) (integer) 60001",
            None,
        );
    }));
    assert!(older_than_a_transcript.is_err());
}

#[test]
fn values_in_nested_arrays_are_matched_by_shape() {
    assert_eq!(
        split_index("2) 1) (integer) 1764412345683001"),
        ("2) 1) ", "(integer) 1764412345683001")
    );
    assert_eq!(
        split_index("   2) (integer) 1764412345683002"),
        ("   2) ", "(integer) 1764412345683002")
    );
    assert_eq!(split_index("1) \"10) x\""), ("1) ", "\"10) x\""));
    let step = Step {
        at: "doc.md:1".into(),
        line: "LOCK.ACQUIREALL 2 a b 30000".into(),
        args: vec!["LOCK.ACQUIREALL".into()],
        expected: Vec::new(),
    };
    let mut bindings = Bindings::default();
    check_line(
        &mut bindings,
        &step,
        "2) 1) (integer) 1764412345683001",
        "2) 1) (integer) 1800000000000007",
        None,
    );
    check_line(
        &mut bindings,
        &step,
        "   2) (integer) 1764412345683002",
        "   2) (integer) 1800000000000008",
        Some("2) 1) (integer) 1764412345683001"),
    );
    assert_eq!(bindings.fences.len(), 2);
    let other_depth = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_line(
            &mut Bindings::default(),
            &step,
            "2) 1) (integer) 1764412345683001",
            "2) (integer) 1800000000000007",
            None,
        );
    }));
    assert!(other_depth.is_err());
    bindings
        .note_lease(&["LOCK.ACQUIREALL", "2", "a", "b", "30000", "TOKEN", "t"].map(String::from));
    assert_eq!(bindings.leases.get("a"), Some(&30000));
    assert_eq!(bindings.leases.get("b"), Some(&30000));
    assert_eq!(bindings.leases.get("30000"), None);
}

#[test]
fn bound_fences_are_the_servers_in_later_commands_and_errors() {
    let mut bindings = Bindings::default();
    bindings.bind_fence(1764412345700001, 1800000000000042, "t");
    let args: Vec<String> = ["LOCK.FENCED", "m", "1764412345700001", "GET", "41"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        bindings.substitute(&args),
        ["LOCK.FENCED", "m", "1800000000000042", "GET", "41"]
    );
    let step = Step {
        at: "doc.md:1".into(),
        line: "LOCK.FENCED m 1764412345700000 GET k".into(),
        args: vec!["LOCK.FENCED".into()],
        expected: Vec::new(),
    };
    let stale = "(error) STALE fence is below the highest admitted";
    check_line(
        &mut bindings,
        &step,
        &format!("{stale} (1764412345700001)"),
        &format!("{stale} (1800000000000042)"),
        None,
    );
    let another_fence = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        check_line(
            &mut bindings,
            &step,
            &format!("{stale} (1764412345700001)"),
            &format!("{stale} (1800000000000043)"),
            None,
        );
    }));
    assert!(another_fence.is_err());
}
