//! One section of the report, described once and rendered two ways: the terminal's
//! text and markdown (report.md, docs/performance.md). A section is a list of parts —
//! headings, notes, tables, a chart link — each shown in both renderings unless it says
//! otherwise. The two layouts differ in one rule besides their syntax: markdown shows a
//! remark (what a run did, how it was measured) where it stands, above the tables it
//! explains; the terminal, whose reader looks at the figures first, gathers the remarks
//! after the last table.

use crate::report::common::Table;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Markdown,
}

/// A run of a note's words: plain, or code (in backticks in markdown, bare on the
/// terminal).
pub enum Span {
    Plain(String),
    Code(String),
}

enum Part {
    /// A heading: its markdown level (`###` for the page's, `####` for a section's),
    /// markdown's words and the terminal's.
    Heading {
        level: usize,
        markdown: String,
        text: String,
    },
    /// A paragraph shown where it stands in both.
    Note(Vec<Span>),
    /// A paragraph shown where it stands in markdown, after the last table on the terminal.
    Remark(Vec<Span>),
    Table(Table),
    /// A table of targets: on the terminal a miss reads MISSED, without markdown's bold
    /// (taken off once the columns are laid out: they keep the width it gave them).
    Targets(Table),
    /// A chart linked from markdown; the terminal has none.
    Image {
        alt: String,
        link: String,
    },
    /// An empty line.
    Gap,
    /// A section within this one (the page's), rendered by the same rules.
    Section(Section),
}

#[derive(Default)]
pub struct Section {
    /// Each part with the one format it is limited to, if any.
    parts: Vec<(Option<Format>, Part)>,
}

impl Section {
    pub fn new() -> Self {
        Self::default()
    }

    /// A section of a scenario the run left out: markdown names the option that does.
    pub fn not_measured(left_out: &str) -> Self {
        Self::new()
            .only(
                Format::Markdown,
                Self::new().note(format!(
                    "Not measured in this run (`--only` left {left_out} out)."
                )),
            )
            .only(Format::Text, Self::new().note("Not measured in this run."))
    }

    fn push(mut self, part: Part) -> Self {
        self.parts.push((None, part));
        self
    }

    /// A heading within a section.
    pub fn heading(self, markdown: impl Into<String>, text: impl Into<String>) -> Self {
        self.push(Part::Heading {
            level: 4,
            markdown: markdown.into(),
            text: text.into(),
        })
    }

    /// A heading of the page, above its sections.
    pub fn title(self, markdown: impl Into<String>, text: impl Into<String>) -> Self {
        self.push(Part::Heading {
            level: 3,
            markdown: markdown.into(),
            text: text.into(),
        })
    }

    pub fn note(self, note: impl Into<String>) -> Self {
        self.push(Part::Note(vec![Span::Plain(note.into())]))
    }

    pub fn remark(self, remark: impl Into<String>) -> Self {
        self.remark_spans(vec![Span::Plain(remark.into())])
    }

    pub fn remark_spans(self, spans: Vec<Span>) -> Self {
        self.push(Part::Remark(spans))
    }

    pub fn table(self, table: Table) -> Self {
        self.push(Part::Table(table))
    }

    pub fn targets(self, table: Table) -> Self {
        self.push(Part::Targets(table))
    }

    pub fn image(self, alt: &str, link: &str) -> Self {
        self.push(Part::Image {
            alt: alt.into(),
            link: link.into(),
        })
    }

    pub fn gap(self) -> Self {
        self.push(Part::Gap)
    }

    pub fn section(self, section: Section) -> Self {
        self.push(Part::Section(section))
    }

    /// The parts of `parts`, shown in `format` alone.
    pub fn only(mut self, format: Format, parts: Section) -> Self {
        self.parts.extend(
            parts
                .parts
                .into_iter()
                .map(|(_, part)| (Some(format), part)),
        );
        self
    }

    pub fn render(&self, format: Format) -> String {
        let shown = || {
            self.parts
                .iter()
                .filter(move |(only, _)| only.is_none_or(|only| only == format))
                .map(|(_, part)| part)
        };
        match format {
            // Each part ends its own lines; the remarks come last.
            Format::Text => {
                let remark = |part: &&Part| matches!(part, Part::Remark(_));
                shown()
                    .filter(|part| !remark(part))
                    .chain(shown().filter(remark))
                    .map(text)
                    .collect()
            }
            // Parts are paragraphs: one empty line between two.
            Format::Markdown => shown().map(markdown).collect::<Vec<_>>().join("\n"),
        }
    }
}

fn words(spans: &[Span], format: Format) -> String {
    spans
        .iter()
        .map(|span| match (span, format) {
            (Span::Plain(s), _) | (Span::Code(s), Format::Text) => s.clone(),
            (Span::Code(s), Format::Markdown) => format!("`{s}`"),
        })
        .collect()
}

fn text(part: &Part) -> String {
    match part {
        Part::Heading { text, .. } => format!("{text}\n"),
        Part::Note(spans) | Part::Remark(spans) => words(spans, Format::Text) + "\n",
        Part::Table(table) => table.text() + "\n",
        Part::Targets(table) => table.text().replace("**MISSED**", "MISSED") + "\n",
        Part::Image { .. } => String::new(),
        Part::Gap => "\n".into(),
        Part::Section(section) => section.render(Format::Text) + "\n",
    }
}

fn markdown(part: &Part) -> String {
    match part {
        Part::Heading {
            level, markdown, ..
        } => format!("{} {markdown}\n", "#".repeat(*level)),
        Part::Note(spans) | Part::Remark(spans) => words(spans, Format::Markdown) + "\n",
        Part::Table(table) | Part::Targets(table) => table.markdown(),
        Part::Image { alt, link } => format!("![{alt}]({link})\n"),
        Part::Gap => "\n".into(),
        Part::Section(section) => section.render(Format::Markdown),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Section {
        let mut table = Table::new(&["target", "result"]);
        table.row(vec!["a".into(), "**MISSED**".into()]);
        Section::new()
            .remark_spans(vec![
                Span::Plain("A remark with ".into()),
                Span::Code("code".into()),
                Span::Plain(".".into()),
            ])
            .heading("Targets of a run", "TARGETS")
            .targets(table)
            .note("A note.")
            .only(Format::Markdown, Section::new().image("chart", "c.svg"))
    }

    /// Markdown keeps the order and puts one empty line between parts; the terminal
    /// moves the remarks after the tables, drops the chart and the bold of a miss.
    #[test]
    fn one_section_renders_as_markdown_and_as_text() {
        let section = example();
        assert_eq!(
            section.render(Format::Markdown),
            "A remark with `code`.\n\n#### Targets of a run\n\n\
             | target | result |\n|---|---|\n| a | **MISSED** |\n\nA note.\n\n![chart](c.svg)\n"
        );
        assert_eq!(
            section.render(Format::Text),
            "TARGETS\ntarget  result\n------  ----------\na       MISSED\n\nA note.\nA remark with code.\n"
        );
        assert_eq!(
            Section::not_measured("x").render(Format::Markdown),
            "Not measured in this run (`--only` left x out).\n"
        );
        assert_eq!(
            Section::not_measured("x").render(Format::Text),
            "Not measured in this run.\n"
        );
    }
}
