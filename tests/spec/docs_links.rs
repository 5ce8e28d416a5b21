//! The project's markdown holds together: every relative link and image in every
//! markdown file of the repository points at a file or directory that exists, and
//! every `#fragment` at a heading (or an `<a id>`/`<a name>`) of the markdown file it
//! names, with anchors computed as GitHub computes them. Also the two promises the
//! docs make about themselves: a short README that opens with `make run` and
//! `make test`, and a changelog whose latest release is the crate's version.
//!
//! Markdown is read with `pulldown-cmark` (GitHub's flavour: tables, footnotes, task
//! lists), so what sits in a code span or code block is not a link. Absolute URLs
//! (`https:`, `mailto:`, any scheme) are not checked: the tests use no network.
//!
//! The walk over the repository's markdown lives here and `docs_transcripts` uses it
//! too, so that both tests see the same files.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{BrokenLink, CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag};
use pulldown_cmark::{LinkType, TagEnd};

/// Directories that a build, a virtualenv, a tool's cache or git itself made: not the
/// project's markdown, and not in a clone. (Other hidden directories, `.ci` or
/// `.github`, are the project's own and are walked.)
const GENERATED_DIRS: &[&str] = &[".git", "target", "build", "venv", ".venv", "node_modules"];

/// The README is an entry point, not the reference: that lives in docs/.
const README_MAX_LINES: usize = 250;

pub(crate) fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown extensions GitHub renders, shared by every test that reads the docs.
pub(crate) fn github_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_GFM
}

/// Every `*.md` under `root`, as paths relative to it, sorted.
pub(crate) fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    collect_markdown(root, Path::new(""), &mut files);
    files.sort();
    files
}

fn collect_markdown(root: &Path, dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("read directory {}: {e}", root.join(dir).display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() && !is_generated_dir(&name) {
            collect_markdown(root, &path, files);
        } else if kind.is_file() && name.ends_with(".md") {
            files.push(path);
        }
    }
}

/// Caches go by many names (`__pycache__`, `.pytest_cache`, `.ruff_cache`, …).
fn is_generated_dir(name: &str) -> bool {
    GENERATED_DIRS.contains(&name) || name.contains("cache")
}

/// The repository's markdown files, as `/`-separated paths relative to its root.
pub(crate) fn repo_markdown_files() -> Vec<String> {
    markdown_files(repo_root())
        .iter()
        .map(|path| display_path(path))
        .collect()
}

pub(crate) fn display_path(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// 1-based line of a byte offset, for messages that point into a file.
pub(crate) fn line_at(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// The anchor GitHub gives a heading: lowercase, only letters, digits, spaces, hyphens
/// and underscores kept, spaces turned into hyphens.
fn github_slug(heading_text: &str) -> String {
    heading_text
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Duplicate slugs get `-1`, `-2`, … in document order, as on GitHub.
#[derive(Default)]
struct Slugger {
    seen: HashMap<String, usize>,
}

impl Slugger {
    fn unique(&mut self, heading_text: &str) -> String {
        let slug = github_slug(heading_text);
        let count = self.seen.entry(slug.clone()).or_insert(0);
        let unique = match *count {
            0 => slug,
            n => format!("{slug}-{n}"),
        };
        *count += 1;
        unique
    }
}

/// A link as written, and the line it is on.
#[derive(Debug)]
struct Link {
    line: usize,
    destination: String,
}

/// What one markdown file offers (anchors) and what it points at (links).
#[derive(Default)]
struct Document {
    anchors: HashSet<String>,
    links: Vec<Link>,
    /// `[text][ref]` or `[text][]` whose `[ref]: …` definition is missing: GitHub shows
    /// them as plain text, so the link the author meant is lost.
    undefined_references: Vec<Link>,
}

fn parse_document(markdown: &str) -> Document {
    let mut undefined = Vec::new();
    let mut document = Document::default();
    {
        let note_undefined = |broken: BrokenLink| {
            // A bare `[text]` is ordinary prose (and the syntax of optional arguments);
            // only the explicit reference forms say "this is a link".
            if matches!(broken.link_type, LinkType::Reference | LinkType::Collapsed) {
                undefined.push((broken.span.start, broken.reference.to_string()));
            }
            None
        };
        let parser =
            Parser::new_with_broken_link_callback(markdown, github_options(), Some(note_undefined));
        let mut slugger = Slugger::default();
        let mut heading: Option<String> = None;
        let mut image_depth = 0usize;
        for (event, range) in parser.into_offset_iter() {
            let line = line_at(markdown, range.start);
            match event {
                Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
                Event::End(TagEnd::Heading(_)) => {
                    let text = heading.take().unwrap_or_default();
                    document.anchors.insert(slugger.unique(&text));
                }
                Event::Start(Tag::Link { dest_url, .. }) => document.links.push(Link {
                    line,
                    destination: dest_url.to_string(),
                }),
                Event::Start(Tag::Image { dest_url, .. }) => {
                    image_depth += 1;
                    document.links.push(Link {
                        line,
                        destination: dest_url.to_string(),
                    });
                }
                Event::End(TagEnd::Image) => image_depth -= 1,
                // What a heading renders as text: an image's alt text is not part of it.
                Event::Text(text) | Event::Code(text) if image_depth == 0 => {
                    if let Some(heading) = heading.as_mut() {
                        heading.push_str(&text);
                    }
                }
                Event::SoftBreak | Event::HardBreak => {
                    if let Some(heading) = heading.as_mut() {
                        heading.push(' ');
                    }
                }
                Event::Html(html) | Event::InlineHtml(html) => {
                    note_html(&html, line, &mut document);
                }
                _ => {}
            }
        }
    }
    undefined.sort();
    undefined.dedup();
    document.undefined_references = undefined
        .into_iter()
        .map(|(offset, reference)| Link {
            line: line_at(markdown, offset),
            destination: reference,
        })
        .collect();
    document
}

/// `<a id>`/`<a name>` are anchors; `<a href>` and `<img src>` are links.
fn note_html(html: &str, line: usize, document: &mut Document) {
    for (tag, attributes) in html_tags(html) {
        for (name, value) in attributes {
            match (tag.as_str(), name.as_str()) {
                ("a", "id" | "name") => {
                    document.anchors.insert(value);
                }
                ("a", "href") | ("img", "src") => document.links.push(Link {
                    line,
                    destination: value,
                }),
                _ => {}
            }
        }
    }
}

/// Opening tags in a piece of HTML: lowercase name and quoted attributes. Enough for
/// the HTML that markdown carries; not a general HTML parser.
fn html_tags(html: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut tags = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let end = rest.find('>').unwrap_or(rest.len());
        let inside = &rest[..end];
        rest = &rest[end..];
        let name_end = inside
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(inside.len());
        if name_end == 0 {
            continue; // a closing tag, a comment or a declaration
        }
        let name = inside[..name_end].to_ascii_lowercase();
        tags.push((name, html_attributes(&inside[name_end..])));
    }
    tags
}

fn html_attributes(mut rest: &str) -> Vec<(String, String)> {
    let mut attributes = Vec::new();
    while let Some(eq) = rest.find('=') {
        let name = rest[..eq]
            .rsplit(|c: char| c.is_whitespace())
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let after = rest[eq + 1..].trim_start();
        let Some(quote) = after.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            rest = after;
            continue;
        };
        let value = &after[1..];
        let end = value.find(quote).unwrap_or(value.len());
        attributes.push((name, value[..end].to_string()));
        rest = &value[(end + 1).min(value.len())..];
    }
    attributes
}

fn is_absolute_url(destination: &str) -> bool {
    if destination.starts_with("//") {
        return true;
    }
    let scheme_end = destination.find(':');
    scheme_end.is_some_and(|end| {
        end > 0
            && destination[..end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !destination[..end].contains('/')
    })
}

/// `%20` and friends, as a browser decodes them before looking for the file or id.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// Joins a link path to the linking file's directory (or the root, for `/…`), without
/// touching the filesystem; `None` if it climbs out of the repository.
fn resolve(file: &Path, link_path: &str) -> Option<PathBuf> {
    let mut resolved = if link_path.starts_with('/') {
        PathBuf::new()
    } else {
        file.parent().unwrap_or(Path::new("")).to_path_buf()
    };
    for component in Path::new(link_path.trim_start_matches('/')).components() {
        let still_inside = match component {
            Component::Normal(part) => {
                resolved.push(part);
                true
            }
            Component::ParentDir => resolved.pop(),
            _ => true,
        };
        if !still_inside {
            return None;
        }
    }
    Some(resolved)
}

/// Checks links of many files, parsing each linked markdown file once.
struct Checker<'a> {
    root: &'a Path,
    parsed: HashMap<PathBuf, Document>,
}

impl<'a> Checker<'a> {
    fn new(root: &'a Path) -> Self {
        Checker {
            root,
            parsed: HashMap::new(),
        }
    }

    fn anchors_of(&mut self, target: &Path) -> &HashSet<String> {
        let root = self.root;
        &self
            .parsed
            .entry(target.to_path_buf())
            .or_insert_with(|| {
                let text = std::fs::read_to_string(root.join(target)).unwrap_or_default();
                parse_document(&text)
            })
            .anchors
    }

    /// Every failure of one file, as `file:line → destination: why`.
    fn failures(&mut self, file: &Path, markdown: &str) -> Vec<String> {
        let document = parse_document(markdown);
        let shown = display_path(file);
        let mut failures: Vec<(usize, String)> = document
            .undefined_references
            .iter()
            .map(|link| {
                let reference = &link.destination;
                let why = format!("[{reference}]: no `[{reference}]: …` definition");
                (link.line, why)
            })
            .collect();
        for link in &document.links {
            if let Err(why) = self.check(file, &document, &link.destination) {
                failures.push((link.line, format!("{}: {why}", link.destination)));
            }
        }
        // In the order of the file, whatever kind of failure.
        failures.sort_by_key(|(line, _)| *line);
        failures
            .into_iter()
            .map(|(line, why)| format!("{shown}:{line} → {why}"))
            .collect()
    }

    fn check(&mut self, file: &Path, document: &Document, destination: &str) -> Result<(), String> {
        if is_absolute_url(destination) {
            return Ok(());
        }
        let (path_and_query, fragment) = destination.split_once('#').unwrap_or((destination, ""));
        let link_path = percent_decode(path_and_query.split('?').next().unwrap_or(""));
        let fragment = percent_decode(fragment);
        let target = if link_path.is_empty() {
            file.to_path_buf()
        } else {
            resolve(file, &link_path).ok_or("climbs out of the repository")?
        };
        if target
            .components()
            .any(|c| is_generated_dir(&c.as_os_str().to_string_lossy()))
        {
            return Err(format!(
                "{} is in a directory that builds or tools make, not in the repository",
                display_path(&target)
            ));
        }
        let on_disk = self.root.join(&target);
        if target != file && !on_disk.exists() {
            return Err(format!(
                "no such file or directory: {}",
                display_path(&target)
            ));
        }
        let is_markdown = target.extension().is_some_and(|e| e == "md");
        if fragment.is_empty() || !is_markdown || on_disk.is_dir() {
            return Ok(());
        }
        let anchors = if target == file {
            &document.anchors
        } else {
            self.anchors_of(&target)
        };
        if anchors.contains(&fragment) {
            Ok(())
        } else {
            Err(format!(
                "no heading or <a id> with anchor #{fragment} in {}",
                display_path(&target)
            ))
        }
    }
}

fn read_repo_file(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path))
        .unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut checker = Checker::new(repo_root());
    let mut failures = Vec::new();
    let files = markdown_files(repo_root());
    assert!(
        !files.is_empty(),
        "no markdown found under {}",
        repo_root().display()
    );
    for file in &files {
        let text = std::fs::read_to_string(repo_root().join(file)).expect("read markdown");
        failures.extend(checker.failures(file, &text));
    }
    assert!(
        failures.is_empty(),
        "{} broken link(s) in the markdown:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_readme_is_short_and_starts_with_the_two_commands() {
    let readme = read_repo_file("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: the reference belongs in docs/"
    );
    let first_block = first_fenced_block(&readme).expect("README.md has a fenced code block");
    for command in ["make run", "make test"] {
        assert!(
            first_block.contains(command),
            "README.md's first code block does not show `{command}`:\n{first_block}"
        );
    }
}

fn first_fenced_block(markdown: &str) -> Option<String> {
    let mut block: Option<String> = None;
    for event in Parser::new_ext(markdown, github_options()) {
        match (event, block.as_mut()) {
            (Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_))), None) => {
                block = Some(String::new())
            }
            (Event::Text(text), Some(block)) => block.push_str(&text),
            (Event::End(TagEnd::CodeBlock), Some(_)) => return block,
            _ => {}
        }
    }
    None
}

#[test]
fn the_changelog_names_the_crate_version() {
    let changelog = read_repo_file("CHANGELOG.md");
    let headings = second_level_headings(&changelog);
    assert!(
        headings.iter().any(|h| h == "## [Unreleased]"),
        "CHANGELOG.md has no `## [Unreleased]` heading; its level-2 headings: {headings:?}"
    );
    let released = headings
        .iter()
        .find(|h| h.as_str() != "## [Unreleased]")
        .unwrap_or_else(|| panic!("CHANGELOG.md has no released version: {headings:?}"));
    let (version, _date) = released_version(released)
        .unwrap_or_else(|| panic!("CHANGELOG.md: {released:?} is not `## [X.Y.Z] - YYYY-MM-DD`"));
    assert_eq!(
        version,
        env!("CARGO_PKG_VERSION"),
        "CHANGELOG.md's latest release is not the crate's version (Cargo.toml)"
    );
}

/// `## …` headings as written in the source: Keep a Changelog links `[X.Y.Z]` to a
/// diff at the bottom, so the rendered text would lose the brackets.
fn second_level_headings(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, github_options())
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Heading {
                level: HeadingLevel::H2,
                ..
            }) => Some(markdown[range].trim().to_string()),
            _ => None,
        })
        .collect()
}

/// `## [X.Y.Z] - YYYY-MM-DD` → (`X.Y.Z`, `YYYY-MM-DD`).
fn released_version(heading: &str) -> Option<(&str, &str)> {
    let rest = heading.strip_prefix("## [")?;
    let (version, date) = rest.split_once("] - ")?;
    let is_version = version.split('.').count() == 3
        && version
            .split('.')
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let digits: Vec<usize> = date.split('-').map(str::len).collect();
    let is_date = digits == [4, 2, 2] && date.bytes().all(|b| b.is_ascii_digit() || b == b'-');
    (is_version && is_date).then_some((version, date))
}

#[test]
fn slugs_are_githubs() {
    for (heading, slug) in [
        (
            "LOCK.ACQUIRE key ttl-ms [TOKEN token] [BLOCK timeout-ms] [SHARED] [LIMIT n]",
            "lockacquire-key-ttl-ms-token-token-block-timeout-ms-shared-limit-n",
        ),
        (
            "Throughput (median [min–max] over repetitions)",
            "throughput-median-minmax-over-repetitions",
        ),
        (
            "What fences mean across independent servers",
            "what-fences-mean-across-independent-servers",
        ),
        (
            "LOCK.GUARD key token command [arg ...]",
            "lockguard-key-token-command-arg-",
        ),
        ("The drop-in lock_class", "the-drop-in-lock_class"),
        (
            "Every server (make bench-all)",
            "every-server-make-bench-all",
        ),
        ("Größe und Überblick", "größe-und-überblick"),
    ] {
        assert_eq!(github_slug(heading), slug, "{heading:?}");
    }
}

#[test]
fn headings_are_read_as_rendered_and_duplicates_numbered() {
    let document = parse_document(
        "# `LOCK.GUARD`: write only while holding\n\
         ## **Bold** and [a link](https://example.com) ![logo](x.svg)\n\
         ### Targets\n\
         #### Targets\n\
         Setext heading\n\
         ---\n\
         <a id=\"kept-by-hand\"></a>\n\
         ```\n\
         # not a heading\n\
         ```\n",
    );
    let mut anchors: Vec<_> = document.anchors.into_iter().collect();
    anchors.sort();
    assert_eq!(
        anchors,
        [
            "bold-and-a-link-",
            "kept-by-hand",
            "lockguard-write-only-while-holding",
            "setext-heading",
            "targets",
            "targets-1",
        ]
    );
}

#[test]
fn a_broken_link_in_a_document_is_reported() {
    let root = std::env::temp_dir().join(format!("fencelock-docs-links-{}", std::process::id()));
    std::fs::create_dir_all(root.join("docs")).expect("make temp docs");
    std::fs::create_dir_all(root.join("examples/python")).expect("make temp dir");
    std::fs::write(root.join("README.md"), "# Top\n## Loading the module\n").expect("write");
    let markdown = "# Commands\n\
        [ok](../README.md#loading-the-module) [ok](#commands) [ok](../examples/python)\n\
        [ok](https://example.com/nowhere) [ok][defined] `[not a link](gone.md)`\n\
        [missing file](gone.md)\n\
        [missing anchor](../README.md#loading)\n\
        [missing here](#errors)\n\
        ![missing image](bench.svg)\n\
        [undefined][nowhere]\n\
        <a href=\"../examples/ruby\">html</a>\n\
        [out](../../etc/passwd)\n\
        [built](../target/release/libfencelock.so)\n\
        \n\
        ```\n\
        [in a block](gone.md)\n\
        ```\n\
        \n\
        [defined]: ../README.md#top\n";
    let failures = Checker::new(&root).failures(Path::new("docs/x.md"), markdown);
    std::fs::remove_dir_all(&root).expect("remove temp dir");
    let expected = [
        "docs/x.md:4 → gone.md: no such file or directory: docs/gone.md",
        "docs/x.md:5 → ../README.md#loading: no heading or <a id> with anchor #loading in README.md",
        "docs/x.md:6 → #errors: no heading or <a id> with anchor #errors in docs/x.md",
        "docs/x.md:7 → bench.svg: no such file or directory: docs/bench.svg",
        "docs/x.md:8 → [nowhere]: no `[nowhere]: …` definition",
        "docs/x.md:9 → ../examples/ruby: no such file or directory: examples/ruby",
        "docs/x.md:10 → ../../etc/passwd: climbs out of the repository",
        "docs/x.md:11 → ../target/release/libfencelock.so: target/release/libfencelock.so is in \
         a directory that builds or tools make, not in the repository",
    ];
    assert_eq!(failures, expected);
}

#[test]
fn the_walk_finds_markdown_and_skips_what_builds_make() {
    let root = std::env::temp_dir().join(format!("fencelock-docs-walk-{}", std::process::id()));
    for file in [
        "README.md",
        "docs/commands.md",
        "docs/deep/notes.md",
        "clients/python/README.md",
        "clients/python/build/lib/README.md",
        "clients/python/.venv/lib/README.md",
        "examples/python/venv/x.md",
        "target/doc/x.md",
        ".git/x.md",
        ".ruff_cache/x.md",
        "clients/python/src/__pycache__/x.md",
        ".ci/notes.md",
        "node_modules/pkg/README.md",
        "docs/bench.svg",
    ] {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("make dirs");
        std::fs::write(path, "# x\n").expect("write");
    }
    let found: Vec<String> = markdown_files(&root)
        .iter()
        .map(|p| display_path(p))
        .collect();
    std::fs::remove_dir_all(&root).expect("remove temp dir");
    assert_eq!(
        found,
        [
            ".ci/notes.md",
            "README.md",
            "clients/python/README.md",
            "docs/commands.md",
            "docs/deep/notes.md"
        ]
    );
}

#[test]
fn a_changelog_release_heading_is_parsed() {
    assert_eq!(
        released_version("## [0.2.0] - 2025-12-01"),
        Some(("0.2.0", "2025-12-01"))
    );
    assert_eq!(released_version("## [Unreleased]"), None);
    assert_eq!(released_version("## [0.2] - 2025-12-01"), None);
    assert_eq!(released_version("## [0.2.0] - 1 Dec 2025"), None);
    let headings = second_level_headings(
        "# Changelog\n## [Unreleased]\n```\n## [9.9.9] - 2000-01-01\n```\n## [0.2.0] - 2025-12-01\n",
    );
    assert_eq!(headings, ["## [Unreleased]", "## [0.2.0] - 2025-12-01"]);
}
